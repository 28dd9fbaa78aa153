package diskqueue

import (
	"errors"
	"fmt"
	"os"
)

// Damage: what a reader reports when records fail their checks, and how it
// gets past them (skipDamage, the reader's policy on the segment scanner).

// damageError reports records a reader skipped because their bytes failed a
// check. The reader has already moved past them.
type damageError struct {
	seg      *segment
	from, to int64  // damaged byte range in seg's log; from == to for a gap between segments
	first    uint64 // first skipped seq
	next     uint64 // seq after the last skipped
	cause    error
}

func (d *damageError) Error() string {
	return fmt.Sprintf("segment %s offset %d: records %d..%d skipped: %v", segmentName(d.seg.base, logSuffix), d.from, d.first, d.next-1, d.cause)
}

func (d *damageError) Unwrap() error { return ErrCorrupt }

// isDamage reports whether err says bytes failed their checks (a frame
// that is corrupt or cut short), as opposed to an I/O failure.
func isDamage(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, errShortFrame)
}

// readError wraps an I/O error from a read. A closed file means the segment
// was deleted while we read it.
func readError(seg *segment, off int64, err error) error {
	if errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
	}
	return fmt.Errorf("diskqueue: read %s at %d: %w", seg.path(logSuffix), off, err)
}

// skipDamage finds where reading can go on after a damaged record at off
// (which should hold seq) in generation f of seg's files, with the
// scanner's resync: if nothing after it in the readable segment checks
// out, the rest of it is skipped.
func (l *Log) skipDamage(seg *segment, f *segFiles, off int64, seq uint64, limit int64, cause error) *damageError {
	d := &damageError{seg: seg, from: off, first: seq, to: limit, next: seg.endNow(), cause: cause}
	if seg.sealed.Load() || d.next < seq {
		d.next = max(d.next, seq)
	}
	entries := seg.endNow()
	if seg.partialIndex {
		entries = min(entries, seg.indexedEnd)
	}
	sc := newScanner(f.log, off, seq, limit)
	if f.compacted {
		sc.allowGaps(seg.endNow())
	}
	sc.resync = &resyncPolicy{before: seg.endNow(), maxBody: resyncMaxBody(l.opts.MaxRecordBytes)}
	if f.index != nil {
		sc.resync.useIndex(f.index, seg.base, f.compacted, entries, 0)
	}
	if o, s, ok := sc.resume(off, seq); ok {
		d.to, d.next = o, s
	}
	return d
}

// readFrameAt reads and checks the frame at off on its own.
func (l *Log) readFrameAt(log file, off, limit int64) (recordHeader, []byte, int, error) {
	w := window{chunk: 4096}
	w.reset(log)
	return w.frameAt(off, limit, maxReadBody)
}

// wholeFrames reports how many frames, by their length fields alone, fill
// log from off to exactly size, its end, in a log cut to its records, or
// 0 if they do not (at most maxWholeFrames of them). It tells damage from
// a torn write at the end of the last segment, where a scan found a frame
// that fails its checks and nothing valid after it. A crash leaves a torn
// record cut short by the file's end (write(2)), or, in a mapped log,
// whose size is then its preallocated one, a multiple of allocUnit,
// anywhere up to that end, even ending exactly at it. A log sealed at
// Close is cut to where its last record ends: records that fill one
// whose size is not a multiple of allocUnit were written whole, and a bad
// checksum in them is damage (bit rot), not a write no Put returned for.
// A sealed log whose size happens to be a multiple has its tail cut as a
// torn write's would be.
func wholeFrames(log file, off, size int64) uint64 {
	if size%allocUnit == 0 {
		return 0
	}
	const maxWholeFrames = 64
	var head [lengthSize]byte
	for n := uint64(0); n < maxWholeFrames; n++ {
		if off == size {
			return n
		}
		if _, err := log.ReadAt(head[:], off); err != nil {
			return 0
		}
		m, err := frameLength(head[:], maxReadBody)
		if err != nil || off+int64(m) > size {
			return 0
		}
		off += int64(m)
	}
	if off == size {
		return maxWholeFrames
	}
	return 0
}
