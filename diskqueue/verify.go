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
	Bytes    int64  // bytes of log, index and time-index files
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
	File   string // base name of the file concerned
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
	var rep Report
	warn := &collectHandler{}
	l, err := openLogReadOnly(dir, Options{Logger: slog.New(warn)})
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

func (l *Log) verifySegment(seg *segment, rep *Report) {
	if seg.gone.Load() {
		// A tombstone: every record was acknowledged and the files
		// deleted behind an older segment that still holds records.
		return
	}
	logName := segmentName(seg.base, logSuffix)
	size, end := seg.bounds()
	f, err := l.segFiles(seg)
	if err != nil && errors.Is(err, os.ErrNotExist) && !seg.writing.Load() {
		// A live writer deleted it, every record acknowledged, since the
		// view opened.
		return
	}
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{File: logName, Offset: -1, Err: err})
		return
	}
	if f.log == nil {
		return // the in-memory segment of an empty queue
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
	}
	indexName := segmentName(seg.base, indexSuffix)
	// A live writer may be writing a new segment's headers this moment.
	creating := !seg.sealed.Load() && end == seg.base
	if _, err := decodeFileHeader(index, magicIndex); err != nil {
		if !creating || len(index) >= fileHeaderSize && !allZero(index[:fileHeaderSize]) {
			rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: 0, Err: err})
		}
		index = nil
	}
	sc := newScanner(f.log, fileHeaderSize, seg.base, size, maxBodyForRead(l.opts.MaxRecordBytes))
	for {
		for sc.Next() {
			off, h, _ := sc.Record()
			rep.Records++
			i := int64(h.seq - seg.base)
			entry, have := decodeIndexEntry(index, i)
			switch {
			case index == nil:
			case !have:
				if seg.sealed.Load() {
					rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: indexEntryAt(i), Seq: h.seq, Err: errors.New("no index entry")})
				}
			case entry == 0 && !seg.sealed.Load():
				// Not written yet: a live writer copies the record first.
			case entry != off:
				rep.Problems = append(rep.Problems, Problem{File: indexName, Offset: indexEntryAt(i), Seq: h.seq,
					Err: fmt.Errorf("entry says offset %d, the record is at %d", entry, off)})
			}
		}
		if sc.Err() == nil {
			break
		}
		p := Problem{File: logName, Offset: sc.Offset(), Seq: sc.seq, Err: sc.Err()}
		off, seq, ok := resync(&sc.win, sc.Offset(), size, sc.seq, end, maxBodyForRead(l.opts.MaxRecordBytes))
		if errors.Is(p.Err, ErrCorrupt) || errors.Is(p.Err, errShortFrame) {
			p.End = size // nothing after the damage checks out
			if ok {
				p.End = off
			}
		}
		rep.Problems = append(rep.Problems, p)
		if !ok {
			break
		}
		sc = newScanner(f.log, off, seq, size, maxBodyForRead(l.opts.MaxRecordBytes))
	}
	if seg.sealed.Load() && sc.seq != end && sc.Err() == nil {
		rep.Problems = append(rep.Problems, Problem{File: logName, Offset: -1,
			Err: fmt.Errorf("holds seqs up to %d, but the next segment starts at %d", sc.seq, end)})
	}
	if entries, err := l.timeEntries(seg); err != nil && creating && errors.Is(err, ErrCorrupt) {
		// Its header is being written; the time index is derived data.
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
		case !seg.sealed.Load() && (len(b) < ackHeaderSize || allZero(b[:ackHeaderSize])):
			// A live writer is creating it at this moment.
		default:
			if _, _, err := decodeAckHeader(b, seg.base); err != nil {
				rep.Problems = append(rep.Problems, Problem{File: ackName, Offset: 0, Err: err})
			} else if need := ackFileSize(end - seg.base); seg.sealed.Load() && int64(len(b)) < need {
				rep.Problems = append(rep.Problems, Problem{File: ackName, Offset: int64(len(b)),
					Err: fmt.Errorf("%w: %d bytes, the segment's %d records need %d", ErrCorrupt, len(b), end-seg.base, need)})
			}
		}
	}
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
