package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Damage-aware scanning: walking a log's frames and, past a record that
// fails its checks, finding the next one that passes (through the damaged
// frame's own length, else the sequence index, else a byte-wise resync).

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
// (which should hold seq) in generation f of seg's files; if nothing after
// it in the readable segment checks out, the rest of it is skipped.
func (l *Log) skipDamage(seg *segment, f *segFiles, off int64, seq uint64, limit int64, cause error) *damageError {
	d := &damageError{seg: seg, from: off, first: seq, to: limit, next: seg.endNow(), cause: cause}
	if seg.sealed.Load() || d.next < seq {
		d.next = max(d.next, seq)
	}
	entries := seg.endNow()
	if seg.partialIndex {
		entries = min(entries, seg.indexedEnd)
	}
	if o, s, ok := l.resumeAfter(seg.base, f, off, seq, limit, entries); ok {
		d.to, d.next = o, s
	}
	return d
}

// resumeAfter finds the first record after a damaged one at bad (which
// should hold seq) that checks out: the one the damaged frame's own length
// points at, else the first of the sequence index's entries for seqs
// (seq, stop) that points at its record. f.index may be nil. In a
// compacted log the record found may have any seq below stop: those
// between were removed or damaged.
func (l *Log) resumeAfter(base uint64, f *segFiles, bad int64, seq uint64, limit int64, stop uint64) (int64, uint64, bool) {
	try := func(o int64, s uint64) (uint64, bool) {
		if o <= bad || o >= limit {
			return 0, false
		}
		h, _, _, err := l.readFrameAt(f.log, o, limit)
		if err != nil || h.seq != s && !(f.compacted && h.seq > seq && h.seq < stop) {
			return 0, false
		}
		return h.seq, true
	}
	var head [lengthSize]byte
	if _, err := f.log.ReadAt(head[:], bad); err == nil {
		if n, err := frameLength(head[:], maxReadBody); err == nil {
			if s, ok := try(bad+int64(n), seq+1); ok {
				return bad + int64(n), s, true
			}
		}
	}
	if f.index == nil {
		return 0, 0, false
	}
	for s := seq + 1; s < stop; s++ {
		e, err := readIndexEntry(f.index, int64(s-base))
		if err != nil {
			break
		}
		o, removed := indexOffset(uint32(e), f.compacted)
		if removed {
			continue
		}
		if found, ok := try(o, s); ok {
			return o, found, true
		}
	}
	return 0, 0, false
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

// readFrameAt reads and checks the frame at off on its own.
func (l *Log) readFrameAt(log file, off, limit int64) (recordHeader, []byte, int, error) {
	w := window{chunk: 4096}
	w.reset(log)
	return w.frameAt(off, limit, maxReadBody)
}

// resyncMaxBody is the longest body resync checksums at an offset on the
// strength of its seq alone: the limit the log is opened with (or the
// default), and room for an envelope a layer above wraps its bodies in.
// Readers take any length (maxReadBody), but resync tries every byte
// offset in damaged data, where lengths are random: with no bound each
// try read and checksummed up to the rest of the segment, and Verify of a
// segment with one damaged 8 KiB record took 11 s. A longer frame is tried
// only where it ends as a frame does (resync).
func resyncMaxBody(configured int) int {
	return max(configured, DefaultMaxRecordBytes) + 4<<10
}

// resync looks for the next frame that checks out after damage at off,
// trying every byte offset, for a seq in (after, before). A cheap test of
// the seq field comes before the checksum, so this costs little more than
// a read of the bytes. A frame announcing a body over maxBody (one written
// under a larger limit than the log is opened with) is read only if it
// ends where the written bytes do or where a header with a later seq
// starts: a test of a few bytes that random data rarely passes, where
// reading the frame would cost up to the rest of the segment. It is used
// only where no index can say where the next record starts.
func resync(w *window, off, limit int64, after, before uint64, maxBody int) (int64, uint64, bool) {
	for p := off + 1; p+recordHeaderSize <= limit; p++ {
		head, err := w.bytesAt(p, recordHeaderSize, limit)
		if err != nil {
			return 0, 0, false
		}
		seq := binary.BigEndian.Uint64(head[9:17])
		if seq <= after || seq >= before || head[8]&^knownFlags != 0 {
			continue
		}
		bound := maxBody
		if l := int64(int32(binary.BigEndian.Uint32(head[0:4]))); l-frameFixedAfterLength > int64(maxBody) {
			if !endsAsAFrame(w, p+lengthSize+l, limit, seq, before) {
				continue
			}
			bound = maxReadBody
		}
		if h, _, _, err := w.frameAt(p, limit, bound); err == nil && h.seq == seq {
			return p, seq, true
		}
	}
	return 0, 0, false
}

// endsAsAFrame reports whether a frame of seq ending at end would end as
// one does: at the written end (limit), or where a header of a later seq
// below before starts.
func endsAsAFrame(w *window, end, limit int64, seq, before uint64) bool {
	if end == limit {
		return true
	}
	if end > limit || end+recordHeaderSize > limit {
		return false
	}
	// 25 bytes on their own: through the window, each try read a chunk.
	var next [recordHeaderSize]byte
	if n, _ := w.r.ReadAt(next[:], end); n < len(next) {
		return false
	}
	s := binary.BigEndian.Uint64(next[9:17])
	return s > seq && s < before
}

// scanner decodes consecutive frames from an io.ReaderAt, in the shape of
// bufio.Scanner. It stops at the first frame that does not check out and
// reports the offset up to which everything was good, so recovery (and its
// fuzz test) can run over any bytes, with or without files.
type scanner struct {
	win   window
	off   int64  // offset of the next frame: the end of the good prefix
	seq   uint64 // seq the next frame must carry (at least, with gaps)
	limit int64
	// gapsBelow, when not zero, lets frames skip seqs (a compacted log):
	// the next frame may carry any seq from seq up to gapsBelow.
	gapsBelow uint64

	recOff int64
	hdr    recordHeader
	n      int
	err    error
}

func newScanner(r io.ReaderAt, off int64, seq uint64, limit int64) *scanner {
	s := &scanner{off: off, seq: seq, limit: limit}
	s.win.reset(r)
	return s
}

// allowGaps lets the frames skip seqs, as a compacted log's do, up to end.
func (s *scanner) allowGaps(end uint64) { s.gapsBelow = end }

// Next decodes the next frame. It returns false at the end of the data
// (Err is nil) or at a frame that fails (Err says why: errShortFrame for one
// cut short, ErrCorrupt for bad bytes, or an I/O error).
func (s *scanner) Next() bool {
	if s.err != nil || s.off >= s.limit {
		return false
	}
	h, _, n, err := s.win.frameAt(s.off, s.limit, maxReadBody)
	if err == nil && h.seq != s.seq && !(h.seq > s.seq && h.seq < s.gapsBelow) {
		err = fmt.Errorf("%w: record at offset %d has seq %d, want %d", ErrCorrupt, s.off, h.seq, s.seq)
	}
	if err != nil {
		s.err = err
		return false
	}
	s.recOff, s.hdr, s.n = s.off, h, n
	s.off += int64(n)
	s.seq = h.seq + 1
	return true
}

// Record returns the offset, header and frame size of the last good frame.
func (s *scanner) Record() (int64, recordHeader, int) { return s.recOff, s.hdr, s.n }

// Err returns what stopped the scan, nil for a clean end.
func (s *scanner) Err() error { return s.err }

// Offset is the end of the good prefix.
func (s *scanner) Offset() int64 { return s.off }
