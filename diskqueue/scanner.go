package diskqueue

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The segment scanner: one iterator over a segment's log that yields its
// records and, with a resync policy, the spans of damage between them,
// each resumed at the next record that checks out. Every walk over a log
// is a policy on it (pebble's record.Reader, raft-wal's
// readThroughSegment):
//
//   - Open's recovery of the last segment (recoverTailFiles) and a
//     read-only view's open of it (viewTail) share scanTail: records
//     rebuild the index tail, resumed damage is kept for readers to skip,
//     damage nothing resumes after is a torn write (or, filling the log
//     to its end, damage written whole: wholeFrames);
//   - Verify reports each span as a Problem;
//   - an index rebuild gives each damaged seq an entry at the damage;
//   - a reader (skipDamage) and ReadAt's slow path skip a span;
//   - Compact and the time scan of segMaxTime take no resync: the first
//     damage ends the scan, and Err says why.

// resyncPolicy says where a scanner looks for the next record that checks
// out after damage, in this order: where the damaged frame's own length
// says the next one starts; the sequence index's entries, if the policy
// has an index; a byte-by-byte search (resync). The first two cost a read
// or two each; the search reads the bytes after the damage once.
type resyncPolicy struct {
	// before bounds the seqs looked for: those of the segment, or maxSeq
	// for the last one, whose end is not known.
	before uint64
	// maxBody bounds the bodies the search checksums on the strength of
	// a seq field alone (resyncMaxBody).
	maxBody int

	// The index, if any: entries of seqs below indexEnd are tried, at
	// most lookahead of them after each damage (0: all).
	index     io.ReaderAt
	base      uint64
	compacted bool // entries may be marked removed (indexRemoved)
	indexEnd  uint64
	lookahead uint64
}

// useIndex lets the resync try index's entries for seqs below end, at most
// lookahead of them after each damage (0: all).
func (p *resyncPolicy) useIndex(index io.ReaderAt, base uint64, compacted bool, end, lookahead uint64) {
	p.index, p.base, p.compacted, p.indexEnd, p.lookahead = index, base, compacted, end, lookahead
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

// damageSpan is a run of bytes a scanner skipped: [from, to) of the log,
// which should have held the records first..next-1. resumed says a record
// that checks out starts at to (with seq next); otherwise nothing after
// from does, to is the scan's limit, next the policy's before, and the
// scan ends.
type damageSpan struct {
	from, to    int64
	first, next uint64
	resumed     bool
	cause       error
}

// scanner decodes consecutive frames from an io.ReaderAt, in the shape of
// bufio.Scanner, so every policy (and its fuzz test) can run over any
// bytes, with or without files.
type scanner struct {
	win   window
	off   int64  // offset of the next frame: the end of the good prefix
	seq   uint64 // seq the next frame must carry (at least, with gaps)
	limit int64
	// gapsBelow, when not zero, lets frames skip seqs (a compacted log):
	// the next frame may carry any seq from seq up to gapsBelow.
	gapsBelow uint64
	// resync, if set, makes damage an item of the scan; without it the
	// first damage ends the scan.
	resync *resyncPolicy

	recOff  int64
	hdr     recordHeader
	n       int
	damage  damageSpan
	damaged bool // the current item is damage
	done    bool
	err     error
}

func newScanner(r io.ReaderAt, off int64, seq uint64, limit int64) *scanner {
	s := &scanner{off: off, seq: seq, limit: limit}
	s.win.reset(r)
	return s
}

// allowGaps lets the frames skip seqs, as a compacted log's do, up to end.
func (s *scanner) allowGaps(end uint64) { s.gapsBelow = end }

// Next moves to the next item: a record, or with a resync policy a span of
// damage. It returns false at the end of the data (Err is nil), at an I/O
// error, or, with no resync policy, at a frame that fails (Err says why:
// errShortFrame for one cut short, ErrCorrupt for bad bytes).
func (s *scanner) Next() bool {
	s.damaged = false
	if s.err != nil || s.done || s.off >= s.limit {
		return false
	}
	h, _, n, err := s.win.frameAt(s.off, s.limit, maxReadBody)
	if err == nil && h.seq != s.seq && !(h.seq > s.seq && h.seq < s.gapsBelow) {
		err = fmt.Errorf("%w: record at offset %d has seq %d, want %d", ErrCorrupt, s.off, h.seq, s.seq)
	}
	if err == nil {
		s.recOff, s.hdr, s.n = s.off, h, n
		s.off += int64(n)
		s.seq = h.seq + 1
		return true
	}
	if s.resync == nil || !isDamage(err) {
		s.err = err
		return false
	}
	d := damageSpan{from: s.off, to: s.limit, first: s.seq, next: max(s.resync.before, s.seq), cause: err}
	if off, seq, ok := s.resume(s.off, s.seq); ok {
		d.to, d.next, d.resumed = off, seq, true
		s.off, s.seq = off, seq
	} else {
		// Offset and seq stay at the damage: the end of the good records.
		s.done = true
	}
	s.damage, s.damaged = d, true
	return true
}

// Damage returns the current item's span of damage, if it is one.
func (s *scanner) Damage() (damageSpan, bool) { return s.damage, s.damaged }

// Record returns the offset, header and frame size of the last good frame.
func (s *scanner) Record() (int64, recordHeader, int) { return s.recOff, s.hdr, s.n }

// Err returns what stopped the scan, nil for a clean end (or, with a
// resync policy, an end at damage nothing after resumes from).
func (s *scanner) Err() error { return s.err }

// Offset is the end of the good prefix: where the next frame starts, or
// where the damage the scan ended at does.
func (s *scanner) Offset() int64 { return s.off }

// resume finds the first record after a damaged one at bad (which should
// hold seq) that checks out: the one the damaged frame's own length points
// at, else the first of the index's entries for later seqs that points at
// its record, else the first found byte by byte. In a compacted log the
// record found may have any seq below gapsBelow: those between were
// removed or damaged.
func (s *scanner) resume(bad int64, seq uint64) (int64, uint64, bool) {
	p := s.resync
	try := func(o int64, want uint64) (uint64, bool) {
		if o <= bad || o >= s.limit {
			return 0, false
		}
		h, _, _, err := s.win.frameAt(o, s.limit, maxReadBody)
		if err != nil || h.seq != want && !(h.seq > seq && h.seq < s.gapsBelow) {
			return 0, false
		}
		return h.seq, true
	}
	if head, err := s.win.bytesAt(bad, lengthSize, s.limit); err == nil {
		if n, err := frameLength(head, maxReadBody); err == nil {
			if got, ok := try(bad+int64(n), seq+1); ok {
				return bad + int64(n), got, true
			}
		}
	}
	if p.index != nil {
		stop := p.indexEnd
		if p.lookahead > 0 {
			stop = min(stop, seq+1+p.lookahead)
		}
		var e [indexEntrySize]byte
		for want := seq + 1; want < stop; want++ {
			if _, err := p.index.ReadAt(e[:], indexEntryAt(int64(want-p.base))); err != nil {
				break
			}
			o, removed := indexOffset(binary.BigEndian.Uint32(e[:]), p.compacted)
			if removed {
				continue
			}
			if got, ok := try(o, want); ok {
				return o, got, true
			}
		}
	}
	return resync(&s.win, bad, s.limit, seq, p.before, p.maxBody, s.gapsBelow == 0)
}

// resync looks for the next frame that checks out after damage at off,
// trying every byte offset, for a seq in (after, before). A cheap test of
// the seq field comes before the checksum, so this costs little more than
// a read of the bytes. In a log without gaps (dense) a frame of seq s
// found at p must leave room from off to p for the records after+1..s-1,
// at least recordHeaderSize bytes each (the damaged one, after, may be
// cut short): random bytes almost never pass. Runs
// of zeros (space preallocated for appends) are stepped over, since no
// seq field is zero past after. A frame announcing a body over maxBody
// (one written under a larger limit than the log is opened with) is read
// only if it ends where the written bytes do or where a header with a
// later seq starts: a test of a few bytes that random data rarely passes,
// where reading the frame would cost up to the rest of the segment.
func resync(w *window, off, limit int64, after, before uint64, maxBody int, dense bool) (int64, uint64, bool) {
	for p := off + 1; p+recordHeaderSize <= limit; p++ {
		head, err := w.bytesAt(p, recordHeaderSize, limit)
		if err != nil {
			return 0, 0, false
		}
		seq := binary.BigEndian.Uint64(head[9:17])
		if seq == 0 {
			p = skipZeros(w, p) - 1
			continue
		}
		if seq <= after || seq >= before || head[8]&^knownFlags != 0 {
			continue
		}
		if dense && seq-after-1 > uint64(p-off)/recordHeaderSize {
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

// skipZeros is the next offset after p, whose seq field is zeros, at
// which a frame could carry a seq that is not: the one whose seq field
// ends at the first byte after it that is not zero, among the bytes the
// window holds, else the one whose seq field ends just past them.
func skipZeros(w *window, p int64) int64 {
	at := p + 17 // just past the seq field
	if at < w.off || at > w.off+int64(len(w.buf)) {
		return p + 1 // (a mapped window's bytes: one at a time)
	}
	rest := w.buf[at-w.off:]
	i := 0
	for ; i+8 <= len(rest); i += 8 {
		if binary.LittleEndian.Uint64(rest[i:]) != 0 {
			break
		}
	}
	for i < len(rest) && rest[i] == 0 {
		i++
	}
	return at + int64(i) - 16 // the frame whose seq field [p'+9, p'+17) ends at that byte
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
