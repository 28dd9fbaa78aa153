package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"time"
)

// The time index: per segment, sparse (timestamp running maximum, seq)
// entries, one per timeIndexIntervalBytes of log and one for each
// segment's first and last record, so SeekTime reads one small file.

// timeIndexIntervalBytes is how many log bytes pass between time-index
// entries (Kafka's index.interval.bytes default). The first and the last
// record of every segment always get one.
const timeIndexIntervalBytes = 4096

// timeTailEntries is how many entries from its end readTimeTail reads first:
// 4 KiB, far more than one write can leave unconfirmed.
const timeTailEntries = 256

// unknownTime marks a sealed segment whose newest timestamp has not been
// read yet.
const unknownTime = math.MinInt64

// SeekTime returns the seq of the first record stored at or after t. The
// time index keeps the running maximum of timestamps, so the answer is right
// even when the clock stepped backwards: every record before the returned
// one is older than t. It returns [ErrNotFound] if no retained record is
// that new. It goes by the records' timestamps, which come from a clock
// reading shared by the records of about a millisecond ([Record].Time):
// a record put less than about a millisecond after t may carry a time
// before t, and is then not found from t.
func (l *Log) SeekTime(t time.Time) (uint64, error) {
	if l.isClosed.Load() {
		return 0, ErrClosed // as ReadAt
	}
	target := t.UnixNano()
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	// The first segment whose running maximum reaches target: every record
	// before it is older. (Each segment's own figure already is a running
	// maximum unless its time index was damaged; taking it again here keeps
	// the search right either way.)
	i, running := len(segs), int64(math.MinInt64)
	for k, seg := range segs {
		if running = max(running, l.segMaxTime(seg)); running >= target {
			i = k
			break
		}
	}
	if i == len(segs) {
		return 0, fmt.Errorf("%w: no record at or after %v", ErrNotFound, t)
	}
	seg := segs[i]
	start := seg.base
	entries, err := l.timeEntries(seg)
	if errors.Is(err, ErrCorrupt) {
		// The time index is derived data: scan the segment instead.
		l.logger.Warn("diskqueue: time index is damaged; scanning the segment", "segment", seg.base, "err", err)
		entries, err = nil, nil
	}
	if err != nil {
		return 0, err
	}
	// The last entry whose running maximum is still before t: every record
	// up to and including it is older than t.
	k := sort.Search(len(entries), func(k int) bool { return entries[k].maxTime >= target }) - 1
	if k >= 0 {
		start = entries[k].seq + 1
	}
	r := &reader{l: l, seq: start}
	defer r.forget(0)
	for {
		rec, err := r.next()
		var d *damageError
		switch {
		case err == nil:
			if rec.Time.UnixNano() >= target {
				return rec.Seq, nil
			}
		case errors.As(err, &d):
		case err == errNoData:
			return 0, fmt.Errorf("%w: no record at or after %v", ErrNotFound, t)
		default:
			return 0, err
		}
	}
}

type timeEntry struct {
	maxTime int64
	seq     uint64
}

// timeEntries reads a segment's time index, up to what the writer
// published, or what the file holds if that is less: a compaction may have
// replaced it since it was counted (whichever file was opened, its entries
// are whole and sorted, so a prefix of them does).
func (l *Log) timeEntries(seg *segment) ([]timeEntry, error) {
	n := seg.timeIndexBytes.Load()
	f, err := l.fs.OpenFile(seg.path(timeIndexSuffix), os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
		}
		return nil, err
	}
	defer f.Close()
	if size := fileSize(f); size >= 0 {
		n = min(n, size)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("diskqueue: read %s: %w", seg.path(timeIndexSuffix), err)
	}
	return decodeTimeIndex(buf, seg.base)
}

// decodeTimeIndex checks a time-index file's header and returns its entries.
// Entries must stay inside the segment and have non-decreasing seqs and
// timestamps; a file that breaks this is reported as ErrCorrupt.
func decodeTimeIndex(b []byte, base uint64) ([]timeEntry, error) {
	got, err := decodeFileHeader(b, magicTimeIndex)
	if err != nil {
		return nil, err
	}
	if got != base {
		return nil, fmt.Errorf("%w: time index header base %d, want %d", ErrCorrupt, got, base)
	}
	return decodeTimeEntries(b[fileHeaderSize:], base)
}

// decodeTimeEntries decodes time-index entries (no header), checking that
// they stay inside the segment and are sorted.
func decodeTimeEntries(b []byte, base uint64) ([]timeEntry, error) {
	entries := make([]timeEntry, 0, len(b)/timeIndexEntrySize)
	for len(b) >= timeIndexEntrySize {
		e := timeEntry{maxTime: int64(binary.BigEndian.Uint64(b)), seq: binary.BigEndian.Uint64(b[8:])}
		if e.seq < base {
			return nil, fmt.Errorf("%w: time index entry seq %d before segment base %d", ErrCorrupt, e.seq, base)
		}
		if n := len(entries); n > 0 && (e.seq <= entries[n-1].seq || e.maxTime < entries[n-1].maxTime) {
			return nil, fmt.Errorf("%w: time index entries out of order at seq %d", ErrCorrupt, e.seq)
		}
		entries = append(entries, e)
		b = b[timeIndexEntrySize:]
	}
	return entries, nil
}

// readTimeTail reads the last entries of a time-index file and returns
// those up to the last one keep accepts, with the position of the first
// returned entry in the file. It reads the whole file only if none of the
// last timeTailEntries is kept.
func readTimeTail(f file, base uint64, keep func(timeEntry) bool) ([]timeEntry, int64, error) {
	n := fileSize(f)
	if n < fileHeaderSize {
		return nil, 0, fmt.Errorf("%w: time index is %d bytes", ErrCorrupt, n)
	}
	head := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, 0, err
	}
	if got, err := decodeFileHeader(head, magicTimeIndex); err != nil {
		return nil, 0, err
	} else if got != base {
		return nil, 0, fmt.Errorf("%w: time index header base %d, want %d", ErrCorrupt, got, base)
	}
	count := writtenEntries(f, (n-fileHeaderSize)/timeIndexEntrySize, timeIndexEntrySize)
	for from := max(count-timeTailEntries, 0); ; from = 0 {
		buf := make([]byte, (count-from)*timeIndexEntrySize)
		if _, err := f.ReadAt(buf, fileHeaderSize+from*timeIndexEntrySize); err != nil && err != io.EOF {
			return nil, 0, err
		}
		entries, err := decodeTimeEntries(buf, base)
		if err != nil {
			return nil, 0, err
		}
		k := len(entries)
		for k > 0 && !keep(entries[k-1]) {
			k--
		}
		if k > 0 || from == 0 {
			return entries[:k], from, nil
		}
	}
}

// segMaxTime returns the newest timestamp in seg (the time index's running
// maximum at its last record), reading it on first use. If the time index
// cannot say, the log is scanned. A segment still being written answers
// the greatest time: its appends do not publish the figure (an atomic
// store a Put would pay for), so it may hold a record of any time, and
// SeekTime looks in it.
func (l *Log) segMaxTime(seg *segment) int64 {
	if seg.writing.Load() {
		return math.MaxInt64
	}
	if t := seg.maxTime.Load(); t != unknownTime {
		return t
	}
	t, err := l.lastTimeEntry(seg)
	if err != nil {
		l.logger.Warn("diskqueue: time index is damaged; scanning the segment for its newest timestamp", "segment", seg.base, "err", err)
		t = unknownTime + 1
		if f, err := l.acquireFiles(seg); err == nil {
			sc := newScanner(f.log, fileHeaderSize, seg.base, seg.limit(f))
			if f.compacted {
				sc.allowGaps(seg.endNow())
			}
			for sc.Next() {
				_, h, _ := sc.Record()
				t = max(t, h.ts)
			}
			f.release()
		}
	}
	seg.maxTime.CompareAndSwap(unknownTime, t)
	return seg.maxTime.Load()
}

func (l *Log) lastTimeEntry(seg *segment) (int64, error) {
	f, err := l.fs.OpenFile(seg.path(timeIndexSuffix), os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := fileSize(f)
	var e [timeIndexEntrySize]byte
	if n < fileHeaderSize+timeIndexEntrySize {
		return 0, fmt.Errorf("%w: time index has no entries", ErrCorrupt)
	}
	if _, err := f.ReadAt(e[:], n-timeIndexEntrySize); err != nil {
		return 0, err
	}
	if seq := binary.BigEndian.Uint64(e[8:]); seq != seg.endNow()-1 {
		return 0, fmt.Errorf("%w: last time index entry is for seq %d, the segment ends at %d", ErrCorrupt, seq, seg.endNow()-1)
	}
	return int64(binary.BigEndian.Uint64(e[:])), nil
}
