package diskqueue

import (
	"context"
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

// reader walks the log in order. The Queue's own reader (q.rd) is guarded by
// q.readMu; a Scan owns its reader alone.
type reader struct {
	q    *Queue
	seg  *segment // nil until located
	off  int64    // offset of the next record in seg
	seq  uint64   // seq of the next record
	win  window
	slab slab // where small bodies handed out are copied
}

// reset points the reader at seq, which starts at off in seg. If seg's
// files cannot be opened the reader stays where it was.
func (r *reader) reset(seg *segment, off int64, seq uint64) error {
	f, err := r.q.segFiles(seg)
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
			seg, off, seq, err := r.q.locate(r.seq)
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
			nxt := r.q.segmentAfter(r.seg)
			prev, from := r.seq, r.off
			for nxt != nil && nxt.gone.Load() {
				prev = max(prev, nxt.endNow())
				nxt = r.q.segmentAfter(nxt)
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
		d := r.q.skipDamage(r.seg, r.off, r.seq, limit, err)
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
	h, body, n, err := r.win.frameAt(off, limit, maxBodyForRead(r.q.opts.MaxRecordBytes))
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
func (q *Queue) skipDamage(seg *segment, off int64, seq uint64, limit int64, cause error) *damageError {
	d := &damageError{seg: seg, from: off, first: seq, to: limit, next: seg.endNow(), cause: cause}
	if seg.sealed.Load() || d.next < seq {
		d.next = max(d.next, seq)
	}
	entries := seg.endNow()
	if seg.partialIndex {
		entries = min(entries, seg.indexedEnd)
	}
	// The reader holds seg's files open, so this does not fail.
	if f, err := q.segFiles(seg); err == nil {
		if o, s, ok := q.resumeAfter(seg.base, f.log, f.index, off, seq, limit, entries); ok {
			d.to, d.next = o, s
		}
	}
	return d
}

// resumeAfter finds the first record after a damaged one at bad (which
// should hold seq) that checks out: the one the damaged frame's own length
// points at, else the first of the sequence index's entries for seqs
// (seq, stop) that points at its record. index may be nil.
func (q *Queue) resumeAfter(base uint64, log, index file, bad int64, seq uint64, limit int64, stop uint64) (int64, uint64, bool) {
	try := func(o int64, s uint64) bool {
		if o <= bad || o >= limit {
			return false
		}
		h, _, _, err := q.readFrameAt(log, o, limit)
		return err == nil && h.seq == s
	}
	var head [lengthSize]byte
	if _, err := log.ReadAt(head[:], bad); err == nil {
		if n, err := frameLength(head[:], maxBodyForRead(q.opts.MaxRecordBytes)); err == nil && try(bad+int64(n), seq+1) {
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
func (q *Queue) readFrameAt(log file, off, limit int64) (recordHeader, []byte, int, error) {
	w := window{chunk: 4096}
	w.reset(log)
	return w.frameAt(off, limit, maxBodyForRead(q.opts.MaxRecordBytes))
}

// indexEntries reads count consecutive index entries starting at seq's.
func (q *Queue) indexEntries(seg *segment, seq uint64, count int) ([]uint32, error) {
	f, err := q.segFiles(seg)
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
func (q *Queue) locate(seq uint64) (*segment, int64, uint64, error) {
	q.segMu.RLock()
	segs := q.segs
	q.segMu.RUnlock()
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
	offs, err := q.indexEntries(seg, seq, 1)
	if err != nil {
		return nil, 0, 0, err
	}
	return seg, int64(offs[0]), seq, nil
}

// segmentAfter returns the segment following s, or nil.
func (q *Queue) segmentAfter(s *segment) *segment {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	i := sort.Search(len(q.segs), func(i int) bool { return q.segs[i].base > s.base })
	if i < len(q.segs) {
		return q.segs[i]
	}
	return nil
}

// segmentFor returns the segment holding seq, or ErrNotFound.
func (q *Queue) segmentFor(seq uint64) (*segment, error) {
	q.segMu.RLock()
	segs := q.segs
	q.segMu.RUnlock()
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
func (q *Queue) position(seq uint64) (Position, error) {
	seg, off, _, err := q.locate(seq)
	if err != nil {
		return Position{}, err
	}
	return Position{Segment: seg.base, Offset: off}, nil
}

// Read returns the next record in order, waiting for one if the queue is
// empty until ctx ends or the queue closes. The record is in flight until
// [Queue.Ack] acknowledges it; records never acknowledged are delivered
// again after the queue is reopened, so delivery is at-least-once.
//
// With a ctx that is already done, Read does not wait: it returns a record
// that is ready, or ctx.Err().
//
// Records whose bytes fail their checks are never returned: Read skips
// them, copies their bytes to a .bad file, logs a warning and counts them in
// [Stats].CorruptRecords. An I/O error is returned as is and the same
// record is tried again by the next Read.
func (q *Queue) Read(ctx context.Context) (Record, error) {
	for {
		rec, err := q.tryRead()
		if err != errNoData {
			return rec, err
		}
		wait := q.written.Wait()
		// Look again now that we are registered for the next write, so a
		// write between the two is not missed.
		if rec, err = q.tryRead(); err != errNoData {
			return rec, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		case <-q.closeCh:
			return Record{}, ErrClosed
		}
	}
}

// tryRead returns the next record or errNoData.
func (q *Queue) tryRead() (Record, error) {
	q.readMu.Lock()
	defer q.readMu.Unlock()
	for {
		if q.isClosed.Load() {
			return Record{}, ErrClosed
		}
		rec, err := q.rd.next()
		if err == nil {
			seg := q.rd.seg
			a, err := q.ackFor(seg)
			if err != nil {
				q.rd.unread(rec)
				q.readErrors.Add(1)
				return Record{}, err
			}
			if rec.Seq <= q.ackedMax {
				// Acknowledged before a restart, out of order.
				set, err := a.isSet(rec.Seq - seg.base)
				if err != nil {
					q.rd.unread(rec)
					return Record{}, err
				}
				if set {
					continue
				}
			}
			// Record that this far may be handed out before it is, so a
			// crash cannot leave an acknowledgement Open would not count.
			if err := a.raiseReadEnd(rec.Seq+1, seg.base+a.cap); err != nil {
				q.rd.unread(rec)
				return Record{}, err
			}
			q.inFlight.Add(1)
			return rec, nil
		}
		if err == errNoData {
			return Record{}, err
		}
		// next returns damage unwrapped; a type switch, unlike errors.As,
		// costs no allocation on this hot path.
		if d, ok := err.(*damageError); ok {
			q.quarantine(d)
			continue
		}
		q.readErrors.Add(1)
		return Record{}, err
	}
}

// quarantine copies damaged bytes aside, reports them and treats their
// records as acknowledged, so the read cursor can pass them. The caller holds
// q.readMu.
func (q *Queue) quarantine(d *damageError) {
	lost := int64(d.next - d.first)
	q.corruptRecords.Add(lost)
	attrs := []any{"segment", d.seg.base, "offset", d.from, "first_seq", d.first, "records", lost, "err", d.cause}
	if d.to > d.from {
		name := fmt.Sprintf("%s.%d%s", d.seg.path(logSuffix), d.from, badSuffix)
		if err := q.copyBad(d.seg, d.from, d.to, name); err != nil {
			attrs = append(attrs, "bad_file_err", err)
		} else {
			q.badFiles.Add(1)
			attrs = append(attrs, "bad_file", name)
		}
	}
	q.log.Warn("diskqueue: skipped damaged records", attrs...)
	for s := d.first; s < d.next; s++ {
		seg := q.segmentAt(s)
		if seg == nil || seg.gone.Load() {
			continue
		}
		if a, err := q.ackFor(seg); err == nil {
			// Open counts bits only below readEnd.
			a.raiseReadEnd(s+1, seg.base+a.cap)
		}
		if _, err := q.markAckedLocked(seg, s); err != nil {
			q.log.Warn("diskqueue: cannot acknowledge a damaged record; it is skipped again after a restart", "seq", s, "err", err)
		}
	}
}

// copyBad copies bytes [from, to) of seg's log to a new file name.
func (q *Queue) copyBad(seg *segment, from, to int64, name string) error {
	f, err := q.segFiles(seg)
	if err != nil {
		return err
	}
	buf := make([]byte, to-from)
	if _, err := f.log.ReadAt(buf, from); err != nil && err != io.EOF {
		return err
	}
	return q.copyBytes(name, buf)
}

// Ack acknowledges a record returned by [Queue.Read]. Acknowledgements may
// come in any order. When Ack returns nil the acknowledgement is recorded
// in the segment's acknowledgement file, in the kernel: after a crash of
// the process the record is not delivered again (after a power cut, only
// acknowledgements since the last fsync may be lost). The read cursor
// advances past the oldest record not yet acknowledged, and a segment every
// record of which is acknowledged is deleted (or retained, by Options). It
// returns [ErrNotInFlight] for a seq not handed out or already
// acknowledged.
func (q *Queue) Ack(seq uint64) error {
	q.readMu.Lock()
	defer q.readMu.Unlock()
	if q.isClosed.Load() {
		// Close has released the files and the directory.
		return ErrClosed
	}
	if seq < q.ackFloor.Load() || seq >= q.rd.seq {
		return fmt.Errorf("%w: seq %d", ErrNotInFlight, seq)
	}
	// Acks mostly land in the segment the last one did.
	seg := q.lastAcked
	if seg == nil || seq < seg.base || seq >= seg.endNow() {
		seg = q.segmentAt(seq)
		q.lastAcked = seg
	}
	if seg == nil || seg.gone.Load() {
		return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
	}
	was, err := q.markAckedLocked(seg, seq)
	if err != nil {
		return fmt.Errorf("diskqueue: ack %d: %w", seq, err)
	}
	if was {
		return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
	}
	q.inFlight.Add(-1)
	q.acks.Add(1)
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
func (q *Queue) ReadAt(seq uint64) (Record, error) {
	seg, err := q.segmentFor(seq)
	if err != nil {
		return Record{}, err
	}
	limit, end := seg.bounds()
	f, err := q.segFiles(seg)
	if err != nil {
		return Record{}, err
	}
	if f.index == nil || (seg.partialIndex && seq >= seg.indexedEnd) {
		return q.readAtSlow(seg, seq, limit, errors.New("no index entry to trust"))
	}
	if seg.partialIndex {
		end = min(end, seg.indexedEnd)
	}
	count := 1
	if seq+1 < end {
		count = 2 // the next entry bounds the frame, so one read fetches it whole
	}
	offs, err := q.indexEntries(seg, seq, count)
	if err != nil {
		return Record{}, err
	}
	off, stop := int64(offs[0]), limit
	if count == 2 {
		stop = int64(offs[1])
	}
	if off < fileHeaderSize || stop <= off || stop > limit {
		return q.readAtSlow(seg, seq, limit, fmt.Errorf("index entry %d is out of range", off))
	}
	buf := make([]byte, stop-off)
	if _, err := f.log.ReadAt(buf, off); err != nil && err != io.EOF {
		return Record{}, readError(seg, off, err)
	}
	h, body, _, err := decodeRecord(buf, maxBodyForRead(q.opts.MaxRecordBytes))
	if err == nil && h.seq == seq {
		return makeRecord(h, body, nil)
	}
	if err == nil {
		err = fmt.Errorf("record at the indexed offset has seq %d", h.seq)
	}
	return q.readAtSlow(seg, seq, limit, err)
}

// readAtSlow is ReadAt when the index disagrees with the log: the log wins.
// It walks the segment from the start. (Open repairs the last segment's
// index; a sealed segment's index is rebuilt only when its size or header
// is wrong, so an entry scribbled over in place keeps costing a scan, and
// Verify reports it.)
func (q *Queue) readAtSlow(seg *segment, seq uint64, limit int64, cause error) (Record, error) {
	r := &reader{q: q}
	if err := r.reset(seg, fileHeaderSize, seg.base); err != nil {
		return Record{}, err
	}
	for r.off < limit {
		rec, n, err := r.decodeAt(r.off, limit)
		if err != nil {
			break
		}
		if rec.Seq == seq {
			q.log.Warn("diskqueue: index disagrees with log; found the record by scanning the segment (Verify reports the entry)", "segment", seg.base, "seq", seq, "err", cause)
			return rec, nil
		}
		r.off += int64(n)
		r.seq++
	}
	return Record{}, fmt.Errorf("%w: segment %s: seq %d: %v", ErrCorrupt, segmentName(seg.base, logSuffix), seq, cause)
}

// Unacknowledged is Scan of the records with from <= seq < to that are not
// acknowledged (those out of order above the read cursor, before a restart
// too, are left out), as Read would hand them out. It moves no cursor.
func (q *Queue) Unacknowledged(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for rec, err := range q.Scan(max(from, q.ackFloor.Load()), to) {
			if err == nil && q.acknowledged(rec.Seq) {
				continue
			}
			if !yield(rec, err) {
				return
			}
		}
	}
}

// acknowledged reports whether seq is acknowledged: below the floor, in a
// segment deleted as acknowledged, or with its bit set.
func (q *Queue) acknowledged(seq uint64) bool {
	q.readMu.Lock()
	defer q.readMu.Unlock()
	if seq < q.ackFloor.Load() {
		return true
	}
	seg := q.segmentAt(seq)
	if seg == nil || seg.gone.Load() {
		return seg != nil
	}
	a, err := q.ackFor(seg)
	if err != nil {
		return false
	}
	set, _ := a.isSet(seq - seg.base)
	return set
}

// Scan returns an iterator over the records with from <= seq < to, in
// order, without moving any cursor; it suits replay from retained segments.
// Pass [math.MaxUint64] as to for "up to the newest record". Records that
// fail their checks are yielded as an error wrapping [ErrCorrupt] and the
// scan goes on; a from older than the first retained record yields
// [ErrNotFound] and stops.
func (q *Queue) Scan(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if _, err := q.segmentFor(from); err != nil && errors.Is(err, ErrNotFound) && from < q.firstSeq() {
			yield(Record{}, err)
			return
		}
		r := &reader{q: q, seq: from}
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

func (q *Queue) firstSeq() uint64 {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	if len(q.segs) == 0 {
		return 0
	}
	return q.segs[0].base
}

// SeekTime returns the seq of the first record stored at or after t. The
// time index keeps the running maximum of timestamps, so the answer is right
// even when the clock stepped backwards: every record before the returned
// one is older than t. It returns [ErrNotFound] if no retained record is
// that new.
func (q *Queue) SeekTime(t time.Time) (uint64, error) {
	target := t.UnixNano()
	q.segMu.RLock()
	segs := q.segs
	q.segMu.RUnlock()
	// The first segment whose running maximum reaches target: every record
	// before it is older. (Each segment's own figure already is a running
	// maximum unless its time index was damaged; taking it again here keeps
	// the search right either way.)
	i, running := len(segs), int64(math.MinInt64)
	for k, seg := range segs {
		if running = max(running, q.segMaxTime(seg)); running >= target {
			i = k
			break
		}
	}
	if i == len(segs) {
		return 0, fmt.Errorf("%w: no record at or after %v", ErrNotFound, t)
	}
	seg := segs[i]
	start := seg.base
	entries, err := q.timeEntries(seg)
	if errors.Is(err, ErrCorrupt) {
		// The time index is derived data: scan the segment instead.
		q.log.Warn("diskqueue: time index is damaged; scanning the segment", "segment", seg.base, "err", err)
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
	r := &reader{q: q, seq: start}
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
func (q *Queue) timeEntries(seg *segment) ([]timeEntry, error) {
	n := seg.timeIndexBytes.Load()
	f, err := q.fs.OpenFile(seg.path(timeIndexSuffix), os.O_RDONLY, 0)
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
// including segments kept by retention. Records in flight are dropped too:
// acknowledging them afterwards returns ErrNotInFlight.
func (q *Queue) Empty() error {
	if q.readOnly {
		return ErrReadOnly
	}
	reply := make(chan error, 1)
	select {
	case q.emptyCh <- reply:
	case <-q.closeCh:
		return ErrClosed
	}
	select {
	case err := <-reply:
		return err
	case <-q.writerCh:
		return ErrClosed
	}
}
