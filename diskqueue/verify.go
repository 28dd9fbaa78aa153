package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Report is what [Verify] found.
type Report struct {
	Segments int
	Records  uint64 // records that checked out
	// Removed is how many seqs of compacted segments name records
	// [Log.Compact] removed (their index entries say so).
	Removed  uint64
	Bytes    int64 // bytes of log, index and time-index files
	FirstSeq uint64
	ReadSeq  uint64 // the stored read cursor
	WriteSeq uint64
	BadFiles []string // quarantined .bad files present in the directory
	// PendingTail is how many bytes after the last good record of the last
	// segment are not zero: a record being written at this moment, or one
	// a crash tore (no Put returned for it, and the next Open cuts it off).
	// It is not a problem. Zeros there are space preallocated for appends.
	PendingTail int64
	Problems    []Problem
}

// OK reports whether Verify found nothing wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Problem is one thing Verify found wrong.
type Problem struct {
	File   string // base name of the file concerned; the directory's for a problem Open logged (Err says which segment)
	Offset int64  // byte offset in File, or -1
	Seq    uint64 // the record concerned, if any
	Err    error
	// End, when greater than Offset, marks damaged records in a log:
	// readers skip the bytes [Offset, End), and the records that check
	// out resume at End. Zero for every other problem.
	End int64
}

func (p Problem) String() string {
	s := p.File
	if p.Offset >= 0 {
		s += fmt.Sprintf(" offset %d", p.Offset)
	}
	return s + ": " + p.Err.Error()
}

// Verify checks the queue in dir without changing anything, and may run
// while a service has the queue open: every record's framing, checksum and
// sequence number; every sequence-index entry against the record it points
// at; the time index's order and range; and the read cursor against the
// log. Problems are reported in the Report; the error is for failures to
// read at all.
func Verify(dir string) (Report, error) {
	return verify(dir, Options{})
}

// verify is Verify with options (a test's file system).
func verify(dir string, opts Options) (Report, error) {
	var rep Report
	warn := &collectHandler{}
	opts.Logger = slog.New(warn)
	l, err := openLogReadOnly(dir, opts)
	if err != nil {
		return rep, err
	}
	defer l.Close()
	if len(l.cursors) == 0 {
		// A queue whose cursor file is missing: Open delivers everything
		// again, and says so.
		if _, err := l.cursor("", FromOldest()); err != nil {
			return rep, err
		}
	}
	st := l.Stats()
	rep.Segments, rep.Bytes = st.Segments, st.DiskBytes
	rep.FirstSeq, rep.ReadSeq, rep.WriteSeq = st.FirstSeq, st.ReadSeq, st.WriteSeq
	for _, seg := range l.segs {
		l.verifySegment(seg, &rep)
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*"+badSuffix)); len(bad) > 0 {
		for _, b := range bad {
			rep.BadFiles = append(rep.BadFiles, filepath.Base(b))
		}
	}
	for _, w := range warn.messages() {
		rep.Problems = append(rep.Problems, Problem{File: filepath.Base(dir), Offset: -1, Err: errors.New(w)})
	}
	return rep, nil
}

// deletedMeanwhile reports whether seg's log is gone from the directory,
// deleted by a live writer (every record acknowledged) since this view
// opened.
func (l *Log) deletedMeanwhile(seg *segment) bool {
	_, err := l.fs.Stat(seg.path(logSuffix))
	return errors.Is(err, os.ErrNotExist) && !seg.writing.Load()
}

func (l *Log) verifySegment(seg *segment, rep *Report) {
	if seg.gone.Load() {
		// A tombstone: every record was acknowledged and the files
		// deleted behind an older segment that still holds records.
		return
	}
	logName := segmentName(seg.base, logSuffix)
	size, end := seg.bounds()
	f, err := l.acquireFiles(seg)
	if err != nil && errors.Is(err, os.ErrNotExist) && !seg.writing.Load() {
		return // deleted meanwhile (see deletedMeanwhile)
	}
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{File: logName, Offset: -1, Err: err})
		return
	}
	defer f.release()
	if f.log == nil {
		return // the in-memory segment of an empty queue
	}
	if f.size > 0 {
		size = f.size // a compacted generation's
	}
	if n := fileSize(f.log); n > size && !seg.sealed.Load() {
		// The last segment ends in space preallocated for appends (zeros)
		// and perhaps a record being written right now, or one a crash
		// tore, which the next Open cuts off. None of that is damage.
		rep.PendingTail = l.tailBytes(f.log, size, n)
	}
	var index []byte
	if f.index != nil {
		buf := make([]byte, max(fileSize(f.index), 0))
		if _, err := f.index.ReadAt(buf, 0); err == nil || err == io.EOF {
			index = buf
		}
	} else if b, err := readFile(l.fs, seg.path(indexSuffix)); err == nil {
		// The view found it damaged and reads the log alone: the index's
		// own bytes say how (a header of 0 bytes was reported otherwise).
		index = b
	}
	indexName := segmentName(seg.base, indexSuffix)
	// A live writer may be writing a new segment's headers this moment,
	// and the indexes of a segment not sealed are fsynced only when it is:
	// after a power cut they may be empty, which Open rebuilds from the
	// log without a word. Only a header written and wrong is damage there.
	unsealed := !seg.sealed.Load()
	creating := unsealed && end == seg.base
	if _, indexCompacted, err := decodeSegmentHeader(index, magicIndex); err != nil {
		if l.deletedMeanwhile(seg) {
			// A live writer deleted it between opening its log and its
			// index (the log goes first): nothing to check.
			return
		}
		// A missing one is damage all the same: its name is made
		// durable with the log's.
		if !unsealed || f.index == nil && !creating || len(index) >= fileHeaderSize && !allZero(index[:fileHeaderSize]) {
			rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: 0, Err: err})
		}
		index = nil
	} else if indexCompacted != f.compacted {
		rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: 0,
			Err: fmt.Errorf("%w: index and log disagree on whether the segment is compacted (index: %v)", ErrCorrupt, indexCompacted)})
		index = nil
	} else if f.compacted && !indexChecksumOK(index) {
		rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: int64(len(index)) - indexChecksumSize,
			Err: fmt.Errorf("%w: compacted index checksum mismatch", ErrCorrupt)})
	}
	// checkEntry checks the index entry of record seq: at off, or, for a
	// record compaction removed, marked so and pointing at off, where the
	// next record kept starts.
	checkEntry := func(seq uint64, off int64, removed bool) {
		i := int64(seq - seg.base)
		raw, have := decodeIndexEntry(index, i)
		entry, marked := indexOffset(uint32(raw), f.compacted)
		var err error
		switch {
		case index == nil:
		case !have:
			if seg.sealed.Load() {
				err = errors.New("no index entry")
			}
		case raw == 0 && !seg.sealed.Load():
			// Not written yet: a live writer copies the record first.
		case marked != removed && removed:
			err = fmt.Errorf("entry says offset %d, but compaction removed the record", entry)
		case marked != removed:
			err = fmt.Errorf("entry marks the record removed, but it is at %d", off)
		case entry != off:
			err = fmt.Errorf("entry says offset %d, the record is at %d", entry, off)
		}
		if err != nil {
			rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: indexEntryAt(i), Seq: seq, Err: err})
		}
	}
	start, startSeq := int64(fileHeaderSize), seg.base
	if off, seq, punched, found := l.punchedPrefix(f.log, seg.base, size); punched && !f.compacted {
		// Acknowledged records freed in place (punch.go): none of their
		// bytes are left to check.
		start, startSeq = size, end
		if found {
			start, startSeq = off, seq
		}
	}
	sc := newScanner(f.log, start, startSeq, size)
	if f.compacted {
		sc.allowGaps(end)
	}
	// The index is what is checked: the resync searches the log.
	sc.resync = &resyncPolicy{before: end, maxBody: resyncMaxBody(l.opts.MaxRecordBytes)}
	cleanEnd := true
	for next := sc.seq; sc.Next(); next = sc.seq {
		if d, ok := sc.Damage(); ok {
			rep.Problems = append(rep.Problems, Problem{File: logName, Offset: d.from, Seq: d.first, Err: d.cause, End: d.to})
			cleanEnd = d.resumed
			continue
		}
		off, h, _ := sc.Record()
		rep.Records++
		for s := next; s < h.seq; s++ {
			checkEntry(s, off, true)
		}
		checkEntry(h.seq, off, false)
	}
	if err := sc.Err(); err != nil {
		rep.Problems = append(rep.Problems, Problem{File: logName, Offset: sc.Offset(), Seq: sc.seq, Err: err})
		cleanEnd = false
	}
	if cleanEnd && f.compacted {
		for s := sc.seq; s < end; s++ {
			checkEntry(s, size, true) // removed after the last record kept
		}
		rep.Removed += compactedCount(index, int64(end-seg.base))
	}
	if seg.sealed.Load() && sc.seq != end && cleanEnd && !f.compacted {
		rep.Problems = append(rep.Problems, Problem{File: logName, Offset: -1,
			Err: fmt.Errorf("holds seqs up to %d, but the next segment starts at %d", sc.seq, end)})
	}
	if entries, err := l.timeEntries(seg); err != nil && unsealed && errors.Is(err, ErrCorrupt) && l.headerUnwritten(seg.path(timeIndexSuffix)) {
		// Its header is being written, or was never fsynced (see the
		// index above); the time index is derived data.
	} else if err != nil && errors.Is(err, ErrNotFound) {
		// Deleted since it was read above, as in segFiles.
	} else if err != nil {
		rep.Problems = append(rep.Problems, Problem{File: segmentName(seg.base, timeIndexSuffix), Offset: -1, Err: err})
	} else if n := len(entries); n > 0 && entries[n-1].seq >= max(end, seg.base+1) && seg.sealed.Load() && !seg.partialIndex {
		// Only in a segment sealed when the view opened: in one it had to
		// scan (the last, or one a live writer is sealing), an entry past
		// the scanned end is for a record written since.
		rep.Problems = append(rep.Problems, Problem{File: segmentName(seg.base, timeIndexSuffix), Offset: -1,
			Err: fmt.Errorf("entry for seq %d is past the segment's end %d", entries[n-1].seq, end)})
	}
	// Each cursor's acknowledgement file, if it has one yet: a damaged one
	// loses no record (Open recreates it), but its acknowledgements above
	// the cursor's read position would be delivered again.
	for _, c := range l.cursors {
		ackName, _ := filepath.Rel(l.dir, c.ackPath(seg))
		b, err := readFile(l.fs, c.ackPath(seg))
		switch {
		case err != nil:
		case len(b) < ackHeaderSize || allZero(b[:ackHeaderSize]):
			// A live writer is creating it at this moment, or a power cut
			// left it as it was before its first fsync: Open takes it for
			// missing and recreates it, and no acknowledgement in it was
			// ever durable.
		default:
			// One shorter than its records need is not damage: a power cut
			// leaves a bitmap as long as its last fsync, which can come
			// before appends grew it, and Open grows it again (its bits
			// past the end read as not acknowledged, as a power cut's lost
			// acknowledgements are).
			if _, _, err := decodeAckHeader(b, seg.base); err != nil {
				rep.Problems = append(rep.Problems, Problem{File: ackName, Offset: 0, Err: err})
			}
		}
	}
}

// headerUnwritten reports whether the file at path is shorter than a file
// header or its header is all zeros: never written, or never fsynced.
func (l *Log) headerUnwritten(path string) bool {
	head, err := readHead(l.fs, path, fileHeaderSize)
	return err == nil && (len(head) < fileHeaderSize || allZero(head))
}

// collectHandler keeps the warnings a read-only open logs.
type collectHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *collectHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *collectHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(r.Message, "diskqueue: "))
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}

func (h *collectHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *collectHandler) WithGroup(string) slog.Handler      { return h }

func (h *collectHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// compactedCount is how many of the first count entries of a compacted
// segment's index are marked removed.
func compactedCount(index []byte, count int64) uint64 {
	var n uint64
	for i := int64(0); i < count; i++ {
		raw, ok := decodeIndexEntry(index, i)
		if !ok {
			break
		}
		if _, removed := indexOffset(uint32(raw), true); removed {
			n++
		}
	}
	return n
}

// tailBytes returns how many bytes of log from size up to n come before the
// last one that is not zero.
func (l *Log) tailBytes(log file, size, n int64) int64 {
	const block = 64 << 10
	buf := make([]byte, block)
	last := size
	for off := size; off < n; off += block {
		b := buf[:min(block, n-off)]
		m, _ := log.ReadAt(b, off)
		for i := m - 1; i >= 0; i-- {
			if b[i] != 0 {
				last = off + int64(i) + 1
				break
			}
		}
	}
	return last - size
}
