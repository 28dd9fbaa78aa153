package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"sort"
	"time"

	"github.com/golang/snappy"
)

// readChunk is how much of a segment a reader pulls in with one pread.
const readChunk = 256 << 10

// errNoData means the reader has caught up with the writer.
var errNoData = errors.New("diskqueue: no data")

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

// reader walks the log in order. A cursor's reader (c.rd) is guarded by
// c.readMu; a Scan owns its reader alone.
type reader struct {
	l    *Log
	seg  *segment // nil until located
	off  int64    // offset of the next record in seg
	seq  uint64   // seq of the next record
	win  window
	slab slab // where small bodies handed out are copied
}

// reset points the reader at seq, which starts at off in seg. If seg's
// files cannot be opened the reader stays where it was.
func (r *reader) reset(seg *segment, off int64, seq uint64) error {
	f, err := r.l.segFiles(seg)
	if err != nil {
		return err
	}
	r.seg, r.off, r.seq = seg, off, seq
	r.win.reset(f.log)
	return nil
}

// window buffers a stretch of a file so that records are decoded from
// memory, with one pread per readChunk bytes.
type window struct {
	r     io.ReaderAt
	buf   []byte // bytes of r starting at off
	off   int64
	chunk int64 // read-ahead size; zero means readChunk
}

func (w *window) reset(r io.ReaderAt) {
	w.r, w.buf, w.off = r, w.buf[:0], 0
}

// bytesAt returns n bytes at off, reading ahead when they are not buffered.
// limit is the readable end; asking past it is errShortFrame.
func (w *window) bytesAt(off int64, n int, limit int64) ([]byte, error) {
	if off >= w.off && off+int64(n) <= w.off+int64(len(w.buf)) {
		return w.buf[off-w.off:][:n], nil
	}
	if off+int64(n) > limit {
		return nil, errShortFrame
	}
	chunk := w.chunk
	if chunk == 0 {
		chunk = readChunk
	}
	want := min(max(int64(n), chunk), limit-off)
	if int64(cap(w.buf)) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	m, err := w.r.ReadAt(w.buf, off)
	w.buf, w.off = w.buf[:m], off
	if m < int(want) {
		if err == io.EOF {
			// The file is shorter than its known size: someone cut it.
			return nil, errShortFrame
		}
		return nil, err
	}
	return w.buf[:n], nil
}

// frameAt decodes the frame at off: the length first, checked against
// maxBody before anything is read from it, then the whole frame. body
// points into the window's buffer.
func (w *window) frameAt(off, limit int64, maxBody int) (recordHeader, []byte, int, error) {
	head, err := w.bytesAt(off, lengthSize, limit)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	n, err := frameLength(head, maxBody)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	frame, err := w.bytesAt(off, n, limit)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	return decodeRecord(frame, maxBody)
}

// readError wraps an I/O error from a read. A closed file means the segment
// was deleted while we read it.
func readError(seg *segment, off int64, err error) error {
	if errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
	}
	return fmt.Errorf("diskqueue: read %s at %d: %w", seg.path(logSuffix), off, err)
}

// next returns the next record. It returns errNoData when it has caught up
// with the writer, a *damageError (having moved past the damage) when
// records had to be skipped, and an I/O error, without moving, when the read
// failed: that one is worth retrying.
func (r *reader) next() (Record, error) {
	for {
		if r.seg != nil && r.seg.gone.Load() {
			// Every record in it was acknowledged and its files deleted.
			r.seq, r.seg = max(r.seq, r.seg.endNow()), nil
		}
		if r.seg == nil {
			seg, off, seq, err := r.l.locate(r.seq)
			if err != nil {
				return Record{}, err
			}
			if err := r.reset(seg, off, seq); err != nil {
				return Record{}, err
			}
		}
		// sealed before the extent: rotation sets sealed after the last publish.
		sealed := r.seg.sealed.Load()
		limit := r.seg.sizeNow() // every frame below it has a seq below its end
		if r.off >= limit {
			if !sealed {
				return Record{}, errNoData
			}
			nxt := r.l.segmentAfter(r.seg)
			prev, from := r.seq, r.off
			for nxt != nil && nxt.gone.Load() {
				prev = max(prev, nxt.endNow())
				nxt = r.l.segmentAfter(nxt)
			}
			if nxt == nil {
				return Record{}, errNoData
			}
			if err := r.reset(nxt, fileHeaderSize, nxt.base); err != nil {
				return Record{}, err
			}
			if nxt.base > prev {
				return Record{}, &damageError{seg: nxt, from: from, to: from, first: prev, next: nxt.base, cause: errors.New("segments missing")}
			}
			continue
		}
		rec, n, err := r.decodeAt(r.off, limit)
		if err == nil {
			r.off += int64(n)
			r.seq++
			return rec, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, errShortFrame) {
			return Record{}, err
		}
		d := r.l.skipDamage(r.seg, r.off, r.seq, limit, err)
		r.off, r.seq = d.to, d.next
		return Record{}, d
	}
}

// unread steps back over rec, just returned by next, so the next call
// returns it again.
func (r *reader) unread(rec Record) {
	r.seg, r.seq = nil, rec.Seq
}

// decodeAt decodes the record at off, which must be r.seq.
func (r *reader) decodeAt(off, limit int64) (Record, int, error) {
	h, body, n, err := r.win.frameAt(off, limit, maxBodyForRead(r.l.opts.MaxRecordBytes))
	if err != nil {
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, errShortFrame) {
			err = readError(r.seg, off, err)
		}
		return Record{}, 0, err
	}
	if h.seq != r.seq {
		return Record{}, 0, fmt.Errorf("%w: record at offset %d has seq %d, want %d", ErrCorrupt, off, h.seq, r.seq)
	}
	rec, err := makeRecord(h, body, &r.slab)
	return rec, n, err
}

// maxBodyForRead is the largest length a reader accepts. Records written
// under a larger MaxRecordBytes than the current one stay readable; the
// limit only guards against allocating from a damaged length.
func maxBodyForRead(configured int) int {
	return max(configured, DefaultMaxRecordBytes)
}

// slabSize is the size of the blocks small bodies are carved from, so a
// drain allocates once per block rather than once per record.
const (
	slabSize    = 32 << 10
	slabMaxBody = 1 << 10
)

// slab hands out small body buffers from one allocation. Each buffer is
// capped with a full slice expression, so a caller appending to its body
// reallocates instead of writing into its neighbour's.
type slab struct{ buf []byte }

func (s *slab) copy(b []byte) []byte {
	if len(b) > slabMaxBody {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(s.buf)-len(s.buf) < len(b) {
		s.buf = make([]byte, 0, slabSize)
	}
	start := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[start:len(s.buf):len(s.buf)]
}

// makeRecord copies (or decompresses) a checked body into a Record the
// caller owns. A nil slab allocates the body on its own.
func makeRecord(h recordHeader, stored []byte, sl *slab) (Record, error) {
	rec := Record{Seq: h.seq, Time: time.Unix(0, h.ts)}
	if h.flags&flagSnappy != 0 {
		body, err := snappy.Decode(nil, stored)
		if err != nil {
			return Record{}, fmt.Errorf("%w: seq %d: snappy: %v", ErrCorrupt, h.seq, err)
		}
		rec.Body = body
		return rec, nil
	}
	if sl == nil {
		rec.Body = append(make([]byte, 0, len(stored)), stored...)
	} else {
		rec.Body = sl.copy(stored)
	}
	return rec, nil
}

// skipDamage finds where reading can go on after a damaged record at off
// (which should hold seq); if nothing after it in the readable segment
// checks out, the rest of it is skipped.
func (l *Log) skipDamage(seg *segment, off int64, seq uint64, limit int64, cause error) *damageError {
	d := &damageError{seg: seg, from: off, first: seq, to: limit, next: seg.endNow(), cause: cause}
	if seg.sealed.Load() || d.next < seq {
		d.next = max(d.next, seq)
	}
	entries := seg.endNow()
	if seg.partialIndex {
		entries = min(entries, seg.indexedEnd)
	}
	// The reader holds seg's files open, so this does not fail.
	if f, err := l.segFiles(seg); err == nil {
		if o, s, ok := l.resumeAfter(seg.base, f.log, f.index, off, seq, limit, entries); ok {
			d.to, d.next = o, s
		}
	}
	return d
}

// resumeAfter finds the first record after a damaged one at bad (which
// should hold seq) that checks out: the one the damaged frame's own length
// points at, else the first of the sequence index's entries for seqs
// (seq, stop) that points at its record. index may be nil.
func (l *Log) resumeAfter(base uint64, log, index file, bad int64, seq uint64, limit int64, stop uint64) (int64, uint64, bool) {
	try := func(o int64, s uint64) bool {
		if o <= bad || o >= limit {
			return false
		}
		h, _, _, err := l.readFrameAt(log, o, limit)
		return err == nil && h.seq == s
	}
	var head [lengthSize]byte
	if _, err := log.ReadAt(head[:], bad); err == nil {
		if n, err := frameLength(head[:], maxBodyForRead(l.opts.MaxRecordBytes)); err == nil && try(bad+int64(n), seq+1) {
			return bad + int64(n), seq + 1, true
		}
	}
	if index == nil {
		return 0, 0, false
	}
	for s := seq + 1; s < stop; s++ {
		var e [indexEntrySize]byte
		if _, err := index.ReadAt(e[:], fileHeaderSize+int64(s-base)*indexEntrySize); err != nil {
			break
		}
		if o := int64(binary.BigEndian.Uint32(e[:])); try(o, s) {
			return o, s, true
		}
	}
	return 0, 0, false
}

// readFrameAt reads and checks the frame at off on its own.
func (l *Log) readFrameAt(log file, off, limit int64) (recordHeader, []byte, int, error) {
	w := window{chunk: 4096}
	w.reset(log)
	return w.frameAt(off, limit, maxBodyForRead(l.opts.MaxRecordBytes))
}

// indexEntries reads count consecutive index entries starting at seq's.
func (l *Log) indexEntries(seg *segment, seq uint64, count int) ([]uint32, error) {
	f, err := l.segFiles(seg)
	if err != nil {
		return nil, err
	}
	if f.index == nil || (seg.partialIndex && seq+uint64(count) > seg.indexedEnd) {
		return nil, fmt.Errorf("%w: segment %d has no index entry for seq %d", ErrCorrupt, seg.base, seq)
	}
	buf := make([]byte, count*indexEntrySize)
	at := fileHeaderSize + int64(seq-seg.base)*indexEntrySize
	if _, err := f.index.ReadAt(buf, at); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return nil, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
		}
		return nil, fmt.Errorf("diskqueue: read %s at %d: %w", seg.path(indexSuffix), at, err)
	}
	out := make([]uint32, count)
	for i := range out {
		out[i] = binary.BigEndian.Uint32(buf[i*indexEntrySize:])
	}
	return out, nil
}

// locate finds where seq starts. A seq older than the oldest segment (its
// records were acknowledged and deleted) moves to the oldest record kept.
func (l *Log) locate(seq uint64) (*segment, int64, uint64, error) {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	if len(segs) == 0 {
		return nil, 0, 0, ErrClosed
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
	if i < 0 {
		i, seq = 0, segs[0].base
	}
	for i+1 < len(segs) && segs[i].gone.Load() {
		i++
		seq = max(seq, segs[i].base)
	}
	if i < len(segs) && segs[i].base == seq && segs[i].endNow() > seq {
		return segs[i], fileHeaderSize, seq, nil
	}
	seg := segs[i]
	sealed := seg.sealed.Load()
	size, end := seg.bounds()
	if seq >= end {
		if sealed && i+1 < len(segs) {
			return segs[i+1], fileHeaderSize, segs[i+1].base, nil
		}
		if seq > end {
			return nil, 0, 0, fmt.Errorf("%w: seq %d is past the end %d", ErrNotFound, seq, end)
		}
		return seg, size, end, nil
	}
	offs, err := l.indexEntries(seg, seq, 1)
	if err != nil {
		return nil, 0, 0, err
	}
	return seg, int64(offs[0]), seq, nil
}

// segmentAfter returns the segment following s, or nil.
func (l *Log) segmentAfter(s *segment) *segment {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > s.base })
	if i < len(l.segs) {
		return l.segs[i]
	}
	return nil
}

// segmentFor returns the segment holding seq, or ErrNotFound.
func (l *Log) segmentFor(seq uint64) (*segment, error) {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
	if i < 0 {
		if len(segs) == 0 {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: seq %d is older than the first retained record %d", ErrNotFound, seq, segs[0].base)
	}
	if seq >= segs[i].endNow() {
		return nil, fmt.Errorf("%w: seq %d has not been written", ErrNotFound, seq)
	}
	return segs[i], nil
}

// position returns where seq starts, for Stats.
func (l *Log) position(seq uint64) (Position, error) {
	seg, off, _, err := l.locate(seq)
	if err != nil {
		return Position{}, err
	}
	return Position{Segment: seg.base, Offset: off}, nil
}

// copyBad copies bytes [from, to) of seg's log to a new file name, unless
// another cursor meeting the same damage already did, and counts the file.
func (l *Log) copyBad(seg *segment, from, to int64, name string) error {
	if _, err := l.fs.Stat(name); err == nil {
		return nil
	}
	f, err := l.segFiles(seg)
	if err != nil {
		return err
	}
	buf := make([]byte, to-from)
	if _, err := f.log.ReadAt(buf, from); err != nil && err != io.EOF {
		return err
	}
	if err := l.copyBytes(name, buf); err != nil {
		return err
	}
	l.badFiles.Add(1)
	return nil
}

// ReadAt returns the record with sequence number seq, whether or not it has
// been read or acknowledged, without moving any cursor. It costs one read of
// the sequence index and one read of the log, whatever the queue's size:
// the segment is found by binary search over the segment bases held in
// memory, and the index entry sits at a computed offset.
//
// It returns [ErrNotFound] for a seq never written or no longer retained,
// and [ErrCorrupt] if the record's bytes fail their checks.
func (l *Log) ReadAt(seq uint64) (Record, error) {
	seg, err := l.segmentFor(seq)
	if err != nil {
		return Record{}, err
	}
	limit, end := seg.bounds()
	f, err := l.segFiles(seg)
	if err != nil {
		return Record{}, err
	}
	if f.index == nil || (seg.partialIndex && seq >= seg.indexedEnd) {
		return l.readAtSlow(seg, seq, limit, errors.New("no index entry to trust"))
	}
	if seg.partialIndex {
		end = min(end, seg.indexedEnd)
	}
	count := 1
	if seq+1 < end {
		count = 2 // the next entry bounds the frame, so one read fetches it whole
	}
	offs, err := l.indexEntries(seg, seq, count)
	if err != nil {
		return Record{}, err
	}
	off, stop := int64(offs[0]), limit
	if count == 2 {
		stop = int64(offs[1])
	}
	if off < fileHeaderSize || stop <= off || stop > limit {
		return l.readAtSlow(seg, seq, limit, fmt.Errorf("index entry %d is out of range", off))
	}
	buf := make([]byte, stop-off)
	if _, err := f.log.ReadAt(buf, off); err != nil && err != io.EOF {
		return Record{}, readError(seg, off, err)
	}
	h, body, _, err := decodeRecord(buf, maxBodyForRead(l.opts.MaxRecordBytes))
	if err == nil && h.seq == seq {
		return makeRecord(h, body, nil)
	}
	if err == nil {
		err = fmt.Errorf("record at the indexed offset has seq %d", h.seq)
	}
	return l.readAtSlow(seg, seq, limit, err)
}

// readAtSlow is ReadAt when the index disagrees with the log: the log wins.
// It walks the segment from the start. (Open repairs the last segment's
// index; a sealed segment's index is rebuilt only when its size or header
// is wrong, so an entry scribbled over in place keeps costing a scan, and
// Verify reports it.)
func (l *Log) readAtSlow(seg *segment, seq uint64, limit int64, cause error) (Record, error) {
	r := &reader{l: l}
	if err := r.reset(seg, fileHeaderSize, seg.base); err != nil {
		return Record{}, err
	}
	for r.off < limit {
		rec, n, err := r.decodeAt(r.off, limit)
		if err != nil {
			break
		}
		if rec.Seq == seq {
			l.logger.Warn("diskqueue: index disagrees with log; found the record by scanning the segment (Verify reports the entry)", "segment", seg.base, "seq", seq, "err", cause)
			return rec, nil
		}
		r.off += int64(n)
		r.seq++
	}
	return Record{}, fmt.Errorf("%w: segment %s: seq %d: %v", ErrCorrupt, segmentName(seg.base, logSuffix), seq, cause)
}

// Scan returns an iterator over the records with from <= seq < to, in
// order, without moving any cursor; it suits replay from retained segments.
// Pass [math.MaxUint64] as to for "up to the newest record". Records that
// fail their checks are yielded as an error wrapping [ErrCorrupt] and the
// scan goes on; a from older than the first retained record yields
// [ErrNotFound] and stops.
func (l *Log) Scan(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if _, err := l.segmentFor(from); err != nil && errors.Is(err, ErrNotFound) && from < l.firstSeq() {
			yield(Record{}, err)
			return
		}
		r := &reader{l: l, seq: from}
		for r.seq < to {
			rec, err := r.next()
			if err == errNoData {
				return
			}
			if err != nil {
				var d *damageError
				if !errors.As(err, &d) {
					yield(Record{}, err)
					return
				}
				if !yield(Record{Seq: d.first}, fmt.Errorf("%w: %v", ErrCorrupt, d)) {
					return
				}
				continue
			}
			if rec.Seq >= to || !yield(rec, nil) {
				return
			}
		}
	}
}

func (l *Log) firstSeq() uint64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if len(l.segs) == 0 {
		return 0
	}
	return l.segs[0].base
}

// SeekTime returns the seq of the first record stored at or after t. The
// time index keeps the running maximum of timestamps, so the answer is right
// even when the clock stepped backwards: every record before the returned
// one is older than t. It returns [ErrNotFound] if no retained record is
// that new.
func (l *Log) SeekTime(t time.Time) (uint64, error) {
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

// timeEntries reads a segment's time index, up to what the writer published.
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

// Empty discards every record put before the call, acknowledged or not,
// including segments kept by retention, and moves every cursor to the end.
// Records in flight are dropped too: acknowledging them afterwards returns
// ErrNotInFlight.
func (l *Log) Empty() error {
	if l.readOnly {
		return ErrReadOnly
	}
	return l.request(l.empty)
}

// request is work for the writer goroutine, done between its rounds, so it
// never races a seal, a deletion or a cursor store.
type request struct {
	fn    func() error
	reply chan error
}

// request runs fn on the writer goroutine and returns its error.
func (l *Log) request(fn func() error) error {
	r := request{fn: fn, reply: make(chan error, 1)}
	select {
	case l.reqCh <- r:
	case <-l.closeCh:
		return ErrClosed
	}
	select {
	case err := <-r.reply:
		return err
	case <-l.writerCh:
		return ErrClosed
	}
}
