package diskqueue

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"runtime/debug"
	"time"

	"github.com/golang/snappy"
)

// readChunk is how much of a segment a reader pulls in with one pread.
const readChunk = 256 << 10

// dropStep is how much of a mapped log a reader goes through before it
// drops the pages behind it from the resident set (dropPages): a drain
// then keeps about that much of the log resident, not the whole segment.
const dropStep = 1 << 20

// readPrefetch is how far past a record nextMapped has the CPU fetch the
// next records' bytes (prefetchRead): a drain reads log pages no cache
// holds, and the checksum, the first to touch a record, stalled on each
// of its lines. Fetched some records ahead, a drain of 100-byte records
// took 10-15% less CPU (350-390 ns against 410-430 per Read and Ack, on a
// loaded machine, alternated in one process).
const readPrefetch = 1024

// errNoData means the reader has caught up with the writer.
var errNoData = errors.New("diskqueue: no data")

// reader walks the log in order. A cursor's reader (c.rd) is guarded by
// c.readMu; a Scan owns its reader alone.
type reader struct {
	l     *Log
	seg   *segment  // nil until located
	files *segFiles // the generation of seg's files being read, held; nil with seg
	off   int64     // offset of the next record in files
	seq   uint64    // seq of the next record
	win   window
	slab  slab // where small bodies handed out are copied
	// removed are the seqs the last call to next passed over because
	// compaction removed their records (in order); a cursor counts them
	// acknowledged.
	removed []seqRange
	// jumped says off came from a compacted segment's index, which has no
	// checksum: a gap there is checked against the index before it is
	// believed, and a frame that does not check out sends the reader to
	// walk the log (seekLog). Gaps met walking from a segment's start are
	// the log's own word: frames follow each other, each checked.
	jumped bool
	// known is a readable end of files (the log bytes below it hold whole
	// frames) seen when nextMapped last looked. A generation's readable
	// end only grows, so nextMapped trusts it until a frame runs past it,
	// and loads the segment's extent, which every Put stores, only then:
	// a consumer keeping up with a producer does not pull that cache line
	// across for every record. Zero whenever files changes.
	known int64
}

// seqRange is the seqs [from, to).
type seqRange struct{ from, to uint64 }

// reset points the reader at seq, which starts at off in seg's generation
// f; the reader takes over the caller's hold on f and lets go of the
// generation it held.
func (r *reader) reset(seg *segment, f *segFiles, off int64, seq uint64) {
	r.win.dropAll()
	r.files.release() // f carries the caller's hold, even if it is the same generation
	r.seg, r.files, r.off, r.seq, r.known = seg, f, off, seq, 0
	r.win.reset(f.log)
	r.win.m, _ = f.maps(r.l, seg)
	r.win.dropped = off &^ int64(pageSize-1)
}

// moveTo points the reader at seq, which starts at off in seg's current
// generation. If seg's files cannot be opened the reader stays where it
// was.
func (r *reader) moveTo(seg *segment, off int64, seq uint64) error {
	f, err := r.l.acquireFiles(seg)
	if err != nil {
		return err
	}
	r.reset(seg, f, off, seq)
	return nil
}

// forget lets go of the reader's segment, so the next call to next finds
// seq afresh.
func (r *reader) forget(seq uint64) {
	r.win.dropAll()
	r.files.release()
	r.seg, r.files, r.seq, r.known = nil, nil, seq, 0
	r.win.reset(nil)
}

// passRemoved records that the reader passed the seqs [from, to), removed
// by compaction.
func (r *reader) passRemoved(from, to uint64) {
	if to <= from {
		return
	}
	if n := len(r.removed); n > 0 && r.removed[n-1].to == from {
		r.removed[n-1].to = to
		return
	}
	r.removed = append(r.removed, seqRange{from, to})
}

// window buffers a stretch of a file so that records are decoded from
// memory, with one pread per readChunk bytes; or, for a reader whose
// generation is mapped (m), hands out the mapping's bytes themselves.
// Whoever sets m touches what bytesAt returns only under a fault guard
// (reader.decodeAt), and clears m if touching it faults.
type window struct {
	r     io.ReaderAt
	buf   []byte // bytes of r starting at off
	off   int64
	chunk int64 // read-ahead size; zero means readChunk
	m     []byte
	// dropped is where the pages of m not yet dropped begin (a multiple
	// of pageSize: madvise takes a page-aligned start).
	dropped int64
	touched int64 // the end of what bytesAt handed out of m
}

func (w *window) reset(r io.ReaderAt) {
	w.r, w.buf, w.off, w.m, w.dropped, w.touched = r, w.buf[:0], 0, nil, 0, 0
}

// dropBehind drops the pages of m wholly before off from the resident set
// once dropStep of them are waiting.
func (w *window) dropBehind(off int64) {
	if end := off &^ int64(pageSize-1); end-w.dropped >= dropStep && end <= int64(len(w.m)) {
		dropPages(w.m[w.dropped:end])
		w.dropped = end
	}
}

// dropAll drops every page of m the window touched and has not dropped:
// the reader is leaving the mapping.
func (w *window) dropAll() {
	if end := min(roundUp(w.touched, int64(pageSize)), int64(len(w.m))); end > w.dropped {
		dropPages(w.m[w.dropped:end])
		w.dropped = end
	}
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
	if end := off + int64(n); w.m != nil && off >= 0 && end <= int64(len(w.m)) {
		w.touched = max(w.touched, end)
		return w.m[off:end:end], nil
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

// next returns the next record. It returns errNoData when it has caught up
// with the writer, a *damageError (having moved past the damage) when
// records had to be skipped, and an I/O error, without moving, when the read
// failed: that one is worth retrying. Seqs it passed because compaction
// removed them are in r.removed afterwards, whatever it returns.
//
// A compaction that swaps in a new generation of the segment's files
// while the reader is in it is noticed here: the reader lets go of the old
// generation and finds its next seq in the new one.
func (r *reader) next() (Record, error) {
	seq, ts, body, err := r.nextRaw()
	if err != nil {
		return Record{}, err
	}
	return makeRead(seq, ts, body), nil
}

// nextRaw is next returning the record's fields apart (makeRead), which
// Read's layers pass in registers.
func (r *reader) nextRaw() (seq uint64, ts int64, body []byte, err error) {
	if len(r.removed) > 0 {
		r.removed = r.removed[:0]
	}
	if seq, ts, body, ok := r.nextMapped(); ok {
		return seq, ts, body, nil
	}
	for {
		if r.seg != nil && r.seg.gone.Load() {
			// Every record in it was acknowledged and its files deleted.
			r.forget(max(r.seq, r.seg.endNow()))
		}
		if r.seg != nil && r.files != r.seg.files.Load() {
			r.forget(r.seq) // compacted meanwhile
		}
		if r.seg == nil {
			seg, f, off, seq, err := r.l.locate(r.seq)
			if err != nil {
				return 0, 0, nil, err
			}
			r.reset(seg, f, off, seq)
			r.jumped = f.compacted && off != fileHeaderSize
		}
		// sealed before the extent: rotation sets sealed after the last publish.
		sealed := r.seg.sealed.Load()
		limit := r.seg.limit(r.files) // every frame below it has a seq below its end
		if r.off >= limit {
			if !sealed {
				return 0, 0, nil, errNoData
			}
			if end := r.seg.endNow(); (r.files.compacted || r.seg.punchedBelow(r.seq)) && r.seq < end {
				if r.jumped && !r.removedInIndex(r.seq, end, r.off) {
					r.seekLog()
					continue
				}
				// The segment's last records were removed.
				r.passRemoved(r.seq, end)
				r.seq = end
			}
			r.jumped = false
			nxt := r.l.segmentAfter(r.seg)
			prev, from := r.seq, r.off
			for nxt != nil && nxt.gone.Load() {
				prev = max(prev, nxt.endNow())
				nxt = r.l.segmentAfter(nxt)
			}
			if r.seg.gone.Load() {
				// Deleted since the check above: once it has left the
				// list, so have the segments after it that the search
				// skipped, which is no gap. The top of the loop finds
				// r.seq again.
				continue
			}
			if nxt == nil {
				return 0, 0, nil, errNoData
			}
			if err := r.moveTo(nxt, fileHeaderSize, nxt.base); err != nil {
				return 0, 0, nil, err
			}
			if nxt.base > prev {
				return 0, 0, nil, &damageError{seg: nxt, from: from, to: from, first: prev, next: nxt.base, cause: errors.New("segments missing")}
			}
			if nxt.punchedBelow(nxt.base) {
				r.forget(nxt.base) // locate starts at the first record kept
			}
			continue
		}
		got, n, err := r.decodeAt(r.off, limit)
		if r.jumped {
			r.jumped = false
			if err == nil && got.Seq > r.seq && !r.removedInIndex(r.seq, got.Seq, r.off) || err != nil && isDamage(err) {
				r.seekLog()
				continue
			}
		}
		if err == nil {
			r.passRemoved(r.seq, got.Seq)
			r.off += int64(n)
			r.seq = got.Seq + 1
			if r.win.m != nil {
				r.win.dropBehind(r.off)
			}
			// makeRecord's time is time.Unix(0, ts), whose UnixNano is ts.
			return got.Seq, got.Time.UnixNano(), got.Body, nil
		}
		if !isDamage(err) {
			return 0, 0, nil, err
		}
		d := r.l.skipDamage(r.seg, r.files, r.off, r.seq, limit, err)
		r.off, r.seq = d.to, d.next
		return 0, 0, nil, d
	}
}

// nextMapped is next's common case in one step: the reader's segment is
// current, its generation mapped, and the next frame is r.seq's, whole
// below the readable end, and checks out. It decodes and copies the
// record out of the mapping under one fault guard. Anything else (the end
// of the segment, a compaction's gap, damage, a fault) reports false
// having changed nothing but the slab's spare room and r.known, and next
// takes the long way, which sorts each case out.
func (r *reader) nextMapped() (seq uint64, ts int64, body []byte, ok bool) {
	m := r.win.m
	if m == nil || r.jumped || r.seg.gone.Load() || r.files != r.seg.files.Load() {
		return 0, 0, nil, false
	}
	off := r.off
	if off < 0 || off >= int64(len(m)) {
		return 0, 0, nil, false
	}
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	h, stored, n, err := decodeRecord(m[off:max(off, min(r.known, int64(len(m))))], maxReadBody)
	if err == errShortFrame {
		// Past what was readable when we last looked: look again.
		r.known = r.seg.limit(r.files)
		h, stored, n, err = decodeRecord(m[off:max(off, min(r.known, int64(len(m))))], maxReadBody)
	}
	if err != nil || h.seq != r.seq {
		return 0, 0, nil, false
	}
	if h.flags&flagSnappy != 0 {
		rec, err := makeRecord(h, stored, &r.slab)
		if err != nil {
			return 0, 0, nil, false
		}
		body = rec.Body
	} else {
		// makeRecord's plain case, without building a Record.
		body = r.slab.copy(stored)
	}
	end := off + int64(n)
	if a := end + readPrefetch; a < min(int64(len(m)), r.known) {
		prefetchRead(&m[a])
	}
	r.win.touched = max(r.win.touched, end)
	r.off, r.seq = end, h.seq+1
	r.win.dropBehind(end)
	return h.seq, h.ts, body, true
}

// removedInIndex reports whether the index of the reader's generation
// marks every seq of [from, to) removed, pointing at off.
func (r *reader) removedInIndex(from, to uint64, off int64) bool {
	offs, err := r.l.indexEntries(r.seg, r.files, from, int(to-from))
	if err != nil {
		return false
	}
	for _, e := range offs {
		if o, removed := indexOffset(e, true); !removed || o != off {
			return false
		}
	}
	return true
}

// seekLog moves the reader to the first frame of its segment at or after
// r.seq (or the first that does not check out) by walking the log from its
// start: the index entry it came by disagrees with the log, and the log
// wins.
func (r *reader) seekLog() {
	r.l.logger.Warn("diskqueue: a compacted segment's index disagrees with its log; walking the log (Verify reports the entry)", "segment", r.seg.base, "seq", r.seq)
	limit := r.seg.limit(r.files)
	off := int64(fileHeaderSize)
	for off < limit {
		var h recordHeader
		var n int
		var err error
		if !guarded(func() { h, _, n, err = r.win.frameAt(off, limit, maxReadBody) }) {
			r.win.m = nil // a fault: pread from here on, which tells a cut from a failure
			continue
		}
		if err != nil || h.seq >= r.seq {
			break
		}
		off += int64(n)
	}
	r.off, r.jumped = off, false
}

// guarded runs f, which touches a mapping, and reports false if touching it
// faulted (the file was cut short underneath, or paging it in failed):
// debug.SetPanicOnFault turns the fault into a panic here rather than a
// crash of the process. Any other panic goes on.
func guarded(f func()) (ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	f()
	return true
}

// endGuard ends a fault guard begun by debug.SetPanicOnFault(true), whose
// old setting it restores. It is deferred itself, as
// defer endGuard(debug.SetPanicOnFault(true), &ok), since recover stops a
// panic only in the deferred function's own call: one deferred call per
// guard, which matters where one runs per record. A fault leaves *ok
// false; any other panic goes on.
func endGuard(old bool, ok *bool) {
	debug.SetPanicOnFault(old)
	if v := recover(); v != nil {
		if !isFault(v) {
			panic(v)
		}
		*ok = false
	}
}

// isFault reports whether a recovered value is a memory fault the runtime
// turned into a panic (debug.SetPanicOnFault).
func isFault(v any) bool {
	_, ok := v.(interface{ Addr() uintptr })
	return ok
}

// unread steps back over record seq, just returned by next, so the next
// call returns it again.
func (r *reader) unread(seq uint64) {
	r.forget(seq)
}

// decodeAt decodes the record at off, which must be r.seq or, in a
// compacted log, a later seq of the segment (those between were removed).
// From a mapping the checksum is computed and the body copied out of the
// page cache under a fault guard; a fault sends the reader to pread for
// the rest of the generation, which then reports what it finds (a frame
// cut short is damage, a failed read an I/O error), as before mappings.
func (r *reader) decodeAt(off, limit int64) (Record, int, error) {
	if r.win.m != nil {
		rec, n, err, ok := r.decodeMapped(off, limit)
		if ok {
			return rec, n, err
		}
		r.win.m = nil
	}
	return r.decodeFrame(off, limit)
}

// decodeMapped is decodeFrame under the fault guard (guarded, without
// its closure: it runs once per record). ok is false if touching the mapping
// faulted.
func (r *reader) decodeMapped(off, limit int64) (rec Record, n int, err error, ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	rec, n, err = r.decodeFrame(off, limit)
	return rec, n, err, true
}

func (r *reader) decodeFrame(off, limit int64) (Record, int, error) {
	h, body, n, err := r.win.frameAt(off, limit, maxReadBody)
	if err != nil {
		if !isDamage(err) {
			err = readError(r.seg, off, err)
		}
		return Record{}, 0, err
	}
	if h.seq != r.seq && !(r.files.compacted && h.seq > r.seq && h.seq < r.seg.endNow()) {
		return Record{}, 0, fmt.Errorf("%w: record at offset %d has seq %d, want %d", ErrCorrupt, off, h.seq, r.seq)
	}
	rec, err := makeRecord(h, body, &r.slab)
	return rec, n, err
}

// maxReadBody is the largest body length a reader accepts: any a Put
// could have written under any Options. MaxRecordBytes is not stored in
// the files, so a log opened with a smaller limit than it was written
// under (by a tool with the defaults, say, or a spillq queue's, whose
// records are the bodies in their envelopes) reads every record all the
// same. A damaged length costs no more than the segment: a frame running
// past the readable bytes is damage before anything is read or allocated
// for it (window.bytesAt), and one within them fails its checksum.
const maxReadBody = maxBodyLimit

// slabSize is the size of the blocks small bodies are carved from, so a
// drain allocates once per block rather than once per record.
const (
	slabSize    = 32 << 10
	slabMaxBody = 1 << 10
)

// slab hands out small body buffers from one allocation. Each buffer is
// capped with a full slice expression, so a caller appending to its body
// reallocates instead of writing into its neighbour's. buf changes only
// when a block runs out, and used with each body: storing a pointer into
// the heap costs a write barrier check, and while the collector runs a
// barrier, which a drain would pay per record.
type slab struct {
	buf  []byte
	used int
}

func (s *slab) copy(b []byte) []byte {
	if len(b) > slabMaxBody {
		return append(make([]byte, 0, len(b)), b...)
	}
	if len(s.buf)-s.used < len(b) {
		s.buf, s.used = make([]byte, slabSize), 0
	}
	start := s.used
	end := start + copy(s.buf[start:], b)
	s.used = end
	return s.buf[start:end:end]
}

// makeRecord makes a Record the caller owns of a checked body: copied
// into sl, or with a nil slab stored itself, which must then be the
// caller's own bytes; decompressed either way if it was compressed.
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
		rec.Body = stored[:len(stored):len(stored)] // the caller's own bytes
	} else {
		rec.Body = sl.copy(stored)
	}
	return rec, nil
}

// copyBad copies bytes [from, to) of seg's log to a new file name, unless
// another cursor meeting the same damage already did, and counts the file.
func (l *Log) copyBad(seg *segment, from, to int64, name string) error {
	if _, err := l.fs.Stat(name); err == nil {
		return nil
	}
	f, err := l.acquireFiles(seg)
	if err != nil {
		return err
	}
	defer f.release()
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
// memory, and the index entry sits at a computed offset. A compacted
// segment costs the same.
//
// It returns [ErrNotFound] for a seq never written or no longer retained,
// [ErrCompacted] for one whose record [Log.Compact] removed, and
// [ErrCorrupt] if the record's bytes fail their checks. A ReadAt racing a
// compaction of the record's segment returns the record, or ErrCompacted if
// the compaction removed it.
func (l *Log) ReadAt(seq uint64) (Record, error) {
	if l.isClosed.Load() {
		// Close released the files: a lookup would find every segment
		// gone and say ErrNotFound, as if its records had been consumed.
		return Record{}, ErrClosed
	}
	seg, err := l.segmentFor(seq)
	if err != nil {
		return Record{}, err
	}
	f, err := l.acquireFiles(seg)
	if err != nil {
		return Record{}, err
	}
	defer f.release()
	if seg.punchedBelow(seq) {
		return Record{}, notKept(seg, seq)
	}
	limit, end := seg.bounds()
	if f.size > 0 {
		limit = f.size
	}
	if f.index == nil || (seg.partialIndex && seq >= seg.indexedEnd) {
		return l.readAtSlow(seg, f, seq, limit, errors.New("no index entry to trust"))
	}
	if seg.partialIndex {
		end = min(end, seg.indexedEnd)
	}
	count := 1
	if seq+1 < end {
		count = 2 // the next entry bounds the frame, so one read fetches it whole
	}
	var entries [2]uint32
	offs := entries[:count]
	// Once per ReadAt: each call counts toward mapping a reopened
	// generation (mapAfterLookups).
	logMap, indexMap := f.mapsForLookup(l, seg)
	if err := l.readIndexEntries(seg, f, indexMap, seq, offs); err != nil {
		return Record{}, err
	}
	off, removed := indexOffset(offs[0], f.compacted)
	stop, nextRemoved := limit, false
	if count == 2 {
		stop, nextRemoved = indexOffset(offs[1], f.compacted)
	}
	if removed {
		// A removed entry points where the next record kept starts, as
		// the next entry does (or at the end): a check of the index
		// against itself, since it has no checksum; the log decides when
		// it fails.
		if stop == off && (count == 2 || !nextRemoved) {
			return Record{}, fmt.Errorf("%w: seq %d", ErrCompacted, seq)
		}
		return l.readAtSlow(seg, f, seq, limit, fmt.Errorf("index entry of a removed record points at %d, the next at %d", off, stop))
	}
	if off < fileHeaderSize || stop <= off || stop > limit {
		return l.readAtSlow(seg, f, seq, limit, fmt.Errorf("index entry %d is out of range", off))
	}
	buf := make([]byte, stop-off)
	if err := f.readLog(seg, logMap, buf, off); err != nil {
		return Record{}, err
	}
	h, body, _, err := decodeRecord(buf, maxReadBody)
	if err == nil && h.seq == seq {
		return makeRecord(h, body, nil) // buf is this call's own: no second copy
	}
	if err == nil {
		err = fmt.Errorf("record at the indexed offset has seq %d", h.seq)
	}
	return l.readAtSlow(seg, f, seq, limit, err)
}

// readLog fills b with the log bytes of generation f (held by the caller)
// at off: a copy out of m, f's log mapping, or a pread where there is
// none or touching it faults. Bytes past the end of the file read as zeros
// (the frame's checks then fail), as from pread.
func (f *segFiles) readLog(seg *segment, m, b []byte, off int64) error {
	if copyMapped(b, m, off) {
		return nil
	}
	if _, err := f.log.ReadAt(b, off); err != nil && err != io.EOF {
		return readError(seg, off, err)
	}
	return nil
}

// copyMapped copies len(b) bytes of m at off into b under a fault guard.
// It reports false, with b in any state, when m does not hold them or
// touching them faulted.
func copyMapped(b, m []byte, off int64) (ok bool) {
	if m == nil || off < 0 || off+int64(len(b)) > int64(len(m)) {
		return false
	}
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	copy(b, m[off:])
	return true
}

// readAtSlow is ReadAt when the index disagrees with the log: the log wins.
// It walks the segment (generation f, held by the caller) from the start.
// (Open repairs the last segment's index; a sealed segment's index is
// rebuilt only when its size or header is wrong, so an entry scribbled over
// in place keeps costing a scan, and Verify reports it.)
func (l *Log) readAtSlow(seg *segment, f *segFiles, seq uint64, limit int64, cause error) (Record, error) {
	r := &reader{l: l, seg: seg, files: f, off: fileHeaderSize, seq: seg.base}
	r.win.reset(f.log)
	r.win.m, _ = f.maps(l, seg)
	sc := newScanner(f.log, fileHeaderSize, seg.base, limit)
	if f.compacted {
		sc.allowGaps(seg.endNow())
	}
	sc.resync = &resyncPolicy{before: max(seg.endNow(), seq+1), maxBody: resyncMaxBody(l.opts.MaxRecordBytes)}
	clean := true // no damage hides seq
	for sc.Next() {
		if d, ok := sc.Damage(); ok {
			if !d.resumed || seq < d.next {
				clean = false
				break
			}
			continue
		}
		off, h, _ := sc.Record()
		if h.seq > seq {
			// Only a compacted log skips seqs.
			return Record{}, fmt.Errorf("%w: seq %d", ErrCompacted, seq)
		}
		if h.seq == seq {
			r.off, r.seq = off, seq
			rec, _, err := r.decodeAt(off, limit)
			if err != nil {
				clean = false
				break
			}
			l.logger.Warn("diskqueue: index disagrees with log; found the record by scanning the segment (Verify reports the entry)", "segment", seg.base, "seq", seq, "err", cause)
			return rec, nil
		}
	}
	if f.compacted && clean && sc.Err() == nil {
		return Record{}, fmt.Errorf("%w: seq %d", ErrCompacted, seq)
	}
	return Record{}, fmt.Errorf("%w: segment %s: seq %d: %v", ErrCorrupt, segmentName(seg.base, logSuffix), seq, cause)
}

// Scan returns an iterator over the records with from <= seq < to, in
// order, without moving any cursor; it suits replay from retained segments.
// Pass [math.MaxUint64] as to for "up to the newest record". Records that
// fail their checks are yielded as an error wrapping [ErrCorrupt] and the
// scan goes on; a from older than the first retained record yields
// [ErrNotFound] and stops. Records [Log.Compact] removed are skipped, as if
// never put (their seqs are missing from the sequence); a Scan racing a
// compaction yields each record of the segment once, from the old files or
// the new, and skips only records the compaction removed.
func (l *Log) Scan(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if l.isClosed.Load() {
			yield(Record{}, ErrClosed) // as ReadAt
			return
		}
		if _, err := l.segmentFor(from); err != nil && errors.Is(err, ErrNotFound) && from < l.firstSeq() {
			yield(Record{}, err)
			return
		}
		if seg, err := l.segmentFor(from); err == nil {
			if f, err := l.acquireFiles(seg); err == nil {
				f.release()
				if seg.punchedBelow(from) {
					yield(Record{}, notKept(seg, from))
					return
				}
			}
		}
		r := &reader{l: l, seq: from}
		defer r.forget(0)
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
