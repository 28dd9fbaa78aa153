package diskqueue

import (
	"errors"
	"fmt"
	"iter"
	"sort"
)

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
		seg, err := l.segmentFor(from)
		if err != nil && errors.Is(err, ErrNotFound) && from < l.firstSeq() {
			yield(Record{}, err)
			return
		}
		if err == nil {
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

// locate finds where seq starts: its segment, that segment's current
// generation of files (held: the caller releases it) and the offset there.
// A seq older than the oldest segment (its records were acknowledged and
// deleted) moves to the oldest record kept. A seq compaction removed
// starts where the next record kept does, which a reader tells by its seq.
func (l *Log) locate(seq uint64) (*segment, *segFiles, int64, uint64, error) {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	if len(segs) == 0 {
		return nil, nil, 0, 0, ErrClosed
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
	if i < 0 {
		i, seq = 0, segs[0].base
	}
	for i+1 < len(segs) && segs[i].gone.Load() {
		i++
		seq = max(seq, segs[i].base)
	}
	at := func(seg *segment, off func(*segFiles) (int64, error), seq uint64) (*segment, *segFiles, int64, uint64, error) {
		f, err := l.acquireFiles(seg)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		if k := seg.keptFrom.Load(); seq < k {
			// Freed in place (punch.go): start at the first record kept,
			// or past the segment; the reader passes the seqs between.
			off = func(f *segFiles) (int64, error) {
				if k >= seg.endNow() {
					return seg.limit(f), nil
				}
				offs, err := l.indexEntries(seg, f, k, 1)
				off, _ := indexOffset(offs[0], f.compacted)
				return off, err
			}
		}
		o, err := off(f)
		if err != nil {
			f.release()
			return nil, nil, 0, 0, err
		}
		return seg, f, o, seq, nil
	}
	start := func(*segFiles) (int64, error) { return fileHeaderSize, nil }
	if i < len(segs) && segs[i].base == seq && segs[i].endNow() > seq {
		return at(segs[i], start, seq)
	}
	seg := segs[i]
	sealed := seg.sealed.Load()
	size, end := seg.bounds()
	if seq >= end {
		if sealed && i+1 < len(segs) {
			return at(segs[i+1], start, segs[i+1].base)
		}
		if seq > end {
			return nil, nil, 0, 0, fmt.Errorf("%w: seq %d is past the end %d", ErrNotFound, seq, end)
		}
		return at(seg, func(f *segFiles) (int64, error) {
			if f.size > 0 {
				return f.size, nil
			}
			return size, nil
		}, end)
	}
	return at(seg, func(f *segFiles) (int64, error) {
		offs, err := l.indexEntries(seg, f, seq, 1)
		if err != nil {
			return 0, err
		}
		off, _ := indexOffset(offs[0], f.compacted)
		return off, nil
	}, seq)
}

// position returns where seq starts, for Stats.
func (l *Log) position(seq uint64) (Position, error) {
	seg, f, off, _, err := l.locate(seq)
	if err != nil {
		return Position{}, err
	}
	f.release()
	return Position{Segment: seg.base, Offset: off}, nil
}
