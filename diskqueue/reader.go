package diskqueue

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
)

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
