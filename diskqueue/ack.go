package diskqueue

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"sync/atomic"
)

// segAcks is a cursor's acknowledgement state of one segment.
type segAcks struct {
	seg *segment
	ack *ackFile // nil until opened
	// acked counts the segment's acknowledged records, once ack is open
	// (or the floor has passed the segment).
	acked int64
	// known is an end of seg seen earlier: the records below it exist.
	// Ack goes by it and loads the segment's extent, which every Put
	// stores, only for a seq at or past it, so that acknowledging keeps
	// off the producer's cache line.
	known uint64
	// listed says the state is in the cursor's open list; passed, that
	// it is in the bitmap cache's passed (under readMu).
	listed, passed bool
}

// holds reports whether seq, at or above seg's base, is one of seg's
// records.
func (sa *segAcks) holds(seq uint64) bool {
	if seq < sa.known {
		return true
	}
	sa.known = sa.seg.endNow()
	return seq < sa.known
}

// ackSet is what a cursor knows of its acknowledgements: the floor (the
// oldest record not yet acknowledged), the count and the highest of those
// above it, and each segment's state, its bitmap among them. Guarded by
// the cursor's readMu, except that ackFloor and ackedAbove are read
// without it.
type ackSet struct {
	// ackedMax is the highest seq acknowledged (at Open: an upper bound of
	// those acknowledged before). Read checks the bitmap only for records
	// at or below it: in a steady run acks trail the reader and it costs
	// nothing.
	ackedMax uint64
	// segs is the state of each segment the cursor has touched (made on
	// first use); lastAcked caches the one the last Ack landed in,
	// lastRead the one of the segment the last Read read.
	segs      map[*segment]*segAcks
	lastAcked *segAcks
	lastRead  *segAcks
	// ackFloor is written only under readMu, and readable without it
	// (Depth, Stats, the writer goroutine's housekeeping). Read and the
	// in-order Ack change it, as the cursor's handed and acks, with plain
	// stores (owned.go): a locked instruction for each was a tenth of a
	// drain's time.
	ackFloor ownedUint64 // oldest record not yet acknowledged
	// ackedAbove counts acknowledged records above ackFloor (acked out of
	// order, or before a restart ahead of the floor).
	ackedAbove atomic.Int64
}

// state returns the state of seg, making it on first use: a segment
// deleted, or below the floor, is acknowledged whole.
func (s *ackSet) state(seg *segment) *segAcks {
	sa := s.segs[seg]
	if sa == nil {
		sa = &segAcks{seg: seg}
		if end := seg.endNow(); seg.gone.Load() || end <= s.ackFloor.Load() {
			sa.acked = int64(end - seg.base)
		}
		s.segs[seg] = sa
	}
	return sa
}

// drop forgets seg, which is leaving the log, closing its bitmap.
func (s *ackSet) drop(seg *segment) {
	sa := s.segs[seg]
	if sa == nil {
		return
	}
	s.closeAck(seg)
	delete(s.segs, seg)
	if s.lastAcked == sa {
		s.lastAcked = nil
	}
	if s.lastRead == sa {
		s.lastRead = nil
	}
}

// closeAck closes seg's bitmap, keeping what its state counted.
func (s *ackSet) closeAck(seg *segment) {
	if sa := s.segs[seg]; sa != nil && sa.ack != nil {
		sa.ack.close()
		sa.ack = nil
	}
}

// closeBitmaps closes every bitmap.
func (s *ackSet) closeBitmaps() {
	for _, sa := range s.segs {
		if sa.ack != nil {
			sa.ack.close()
			sa.ack = nil
		}
	}
}

// allAcked reports, for each of segs, whether every record in it is
// acknowledged.
func (s *ackSet) allAcked(segs []*segment) []bool {
	floor := s.ackFloor.Load()
	out := make([]bool, len(segs))
	for i, seg := range segs {
		end := seg.endNow()
		if end <= floor || seg.gone.Load() {
			out[i] = true
			continue
		}
		if sa := s.segs[seg]; sa != nil && sa.acked >= int64(end-seg.base) {
			out[i] = true
		}
	}
	return out
}

// passGone moves the floor's accounting over a deleted segment ending at
// end: what was counted above the floor in it is below it now.
func (s *ackSet) passGone(floor, end uint64) {
	s.ackedAbove.Add(-int64(end - floor))
}

// depth is the records below end() not acknowledged. Without a lock the
// three words come from different moments, so the order matters: the
// floor only rises, acks leave ackedAbove before the floor rises past
// them, and the end is never below the floor. Read in this order, each
// count is of records at or above the floor read and below the end read,
// so depth is never negative (it was, by the records put meanwhile, when
// the end was read first).
func (s *ackSet) depth(end func() uint64) int64 {
	floor := s.ackFloor.Load()
	above := s.ackedAbove.Load()
	return int64(end()-floor) - above
}

// forget drops the cursor's state of a segment leaving the log, closing
// its bitmap file.
func (c *Cursor) forget(seg *segment) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.leaveLocked(seg)
	c.drop(seg)
}

// done reports, for each of segs, whether the cursor has acknowledged
// every record in it.
func (c *Cursor) done(segs []*segment) []bool {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	return c.allAcked(segs)
}

// ackCapacity is how many records seg's bitmap must have room for: those
// it holds, and for the segment being written as many as it can take.
func (c *Cursor) ackCapacity(seg *segment) uint64 {
	capacity := seg.endNow() - seg.base
	if seg.writing.Load() {
		capacity = max(capacity, c.log.recordCapacity())
	}
	return capacity
}

// ackFor returns the cursor's acknowledgement file of seg, opening it on
// first use, or creating it for a segment written before acknowledgement
// files existed (format v1), one written before the cursor was, or one
// whose file is damaged (its acknowledgements above the floor are then
// delivered again: at-least-once). The caller holds c.readMu.
func (c *Cursor) ackFor(seg *segment) (*ackFile, error) {
	sa := c.state(seg)
	if sa.ack != nil {
		return sa.ack, nil
	}
	if c.closed {
		return nil, ErrClosed
	}
	if seg.gone.Load() {
		return nil, fmt.Errorf("%w: segment %d was acknowledged and deleted", ErrNotFound, seg.base)
	}
	c.closeFarBitmapsLocked()
	capacity := c.ackCapacity(seg)
	a, flags, err := c.openAckFile(seg, capacity)
	switch {
	case err == nil && flags&ackGone != 0:
		// A tombstone beside a log that still exists: a crash came while
		// the segment was being deleted. Every record was acknowledged.
		a.close()
		return nil, fmt.Errorf("%w: segment %d was acknowledged and is being deleted", ErrNotFound, seg.base)
	case err == nil:
	case c.log.readOnly:
		// Nothing to read the bits from: start from none.
		a = memAckFile(c.ackPath(seg), seg.base, capacity, nil)
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrCorrupt):
		if !errors.Is(err, os.ErrNotExist) {
			c.logger.Warn("diskqueue: acknowledgement file is damaged; its records above the read cursor are delivered again", "segment", seg.base, "err", err)
		}
		if a, err = c.createAckFile(seg, capacity, c.log.mapped, seg.writing.Load()); err != nil {
			if isNoSpace(err) {
				return nil, fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
			return nil, err
		}
		// Made for a segment being written (grow), it is preallocated to
		// one allocUnit: its records already there may need more, and the
		// next Put's reserve may be far off. Not yet installed, it is
		// nobody else's to grow.
		if err := a.ensure(ackFileSize(seg.endNow() - seg.base)); err != nil {
			a.close()
			return nil, fmt.Errorf("diskqueue: grow %s: %w", a.name, err)
		}
	default:
		return nil, err
	}
	c.installLocked(sa, a)
	return a, nil
}

// ackPath is the cursor's acknowledgement file of seg.
func (c *Cursor) ackPath(seg *segment) string {
	return filepath.Join(c.dir, segmentName(seg.base, ackSuffix))
}

// advanceFloorLocked moves the floor (the oldest unacknowledged record)
// over every acknowledged record it now touches, segment by segment. hint,
// if not nil, is the segment the floor is likely in. The caller holds
// c.readMu.
func (c *Cursor) advanceFloorLocked(hint *segment) error {
	floor := c.ackFloor.Load()
	crossed := false // the floor left a segment: it may be deletable now
	var err error
	for {
		// Bounded by the segments' published ends, which nextSeq is the
		// last of (read through the last segment, which a rotation
		// replaces): the segment in hand says where its records end.
		seg := hint
		hint = nil
		if seg == nil || floor < seg.base || floor >= seg.endNow() {
			seg = c.log.segmentAt(floor)
		}
		if seg == nil {
			break
		}
		segEnd := seg.endNow()
		if seg.gone.Load() {
			c.passGone(floor, segEnd)
			floor, crossed = segEnd, true
			continue
		}
		var a *ackFile
		if a, err = c.ackFor(seg); err != nil {
			break
		}
		var j uint64
		if j, err = a.firstClear(floor-seg.base, segEnd-seg.base); err != nil {
			break
		}
		next := seg.base + j
		c.ackedAbove.Add(-int64(next - floor))
		floor = next
		if next < segEnd {
			break
		}
		crossed = crossed || seg.sealed.Load()
		c.retire(c.segs[seg])
	}
	if floor != c.ackFloor.Load() {
		c.ackFloor.Store(floor)
		if crossed {
			c.log.wake()
		}
	}
	return err
}

// markAckedLocked acknowledges seq, which was handed out, in seg. It
// reports whether seq already was acknowledged (then nothing changes). The
// caller holds c.readMu.
func (c *Cursor) markAckedLocked(sa *segAcks, seq uint64) (bool, error) {
	seg := sa.seg
	a := sa.ack // Ack has the state already: no second map lookup
	if a == nil {
		var err error
		if a, err = c.ackFor(seg); err != nil {
			return false, err
		}
	}
	set := false
	if seq == c.ackFloor.Load() {
		// In order, the common case: when the next record is not
		// acknowledged yet the floor steps over this one alone, with no
		// round trip through ackedAbove and no scan of the bitmap. The
		// next record is in the same segment, so no segment is done.
		sa.holds(seq + 1) // raises known past seq+1 if that record exists
		was, nextSet, ok, err := a.setAtFloor(seq-seg.base, sa.known-seg.base)
		if ok && (err != nil || was) {
			return was, err
		}
		if ok && !nextSet {
			c.ackedMax = max(c.ackedMax, seq)
			sa.acked++
			c.ackFloor.storeOwned(seq + 1)
			return false, nil
		}
		set = ok
	}
	if !set {
		if was, err := a.testAndSet(seq - seg.base); err != nil || was {
			return was, err
		}
	}
	c.ackedMax = max(c.ackedMax, seq)
	c.ackedAbove.Add(1)
	sa.acked++
	// Sealed first: the active segment's end is the line every Put stores.
	if seg.sealed.Load() && sa.acked >= int64(seg.endNow()-seg.base) {
		c.log.wake() // the whole segment may go
	}
	if seq == c.ackFloor.Load() {
		// The acknowledgement is recorded; a floor that cannot move now
		// (a failed read of the next segment's bitmap) moves on a later one.
		if err := c.advanceFloorLocked(seg); err != nil {
			c.logger.Warn("diskqueue: cannot advance the read cursor yet", "seq", seq, "err", err)
		}
	}
	return false, nil
}

// loadAcks runs when the cursor is opened, once its floor is known: it
// opens the acknowledgement files from the floor on, counts the records
// acknowledged above it (only up to each file's readEnd: nothing past it
// was ever handed out, so Open reads no more than the last run's reading
// reached), and moves the floor over them. The caller holds c.readMu.
func (c *Cursor) loadAcks() error {
	floor := c.ackFloor.Load()
	c.log.segMu.RLock()
	segs := c.log.segs
	c.log.segMu.RUnlock()
	// stop: past the first bitmap that says its segment was never read,
	// where a bitmap is opened only if its header says it was (wasRead).
	stop := false
	for _, seg := range segs {
		end := seg.endNow()
		if end <= floor {
			continue // state counts it acknowledged
		}
		if stop && !seg.gone.Load() && !c.wasRead(seg) {
			continue
		}
		sa := c.state(seg)
		if seg.gone.Load() {
			c.ackedAbove.Add(int64(end - max(floor, seg.base)))
			c.ackedMax = max(c.ackedMax, end-1)
			continue
		}
		a, err := c.ackFor(seg)
		if err != nil {
			return err
		}
		lo := max(floor, seg.base)
		hi := min(a.readEnd, end)
		if hi <= lo {
			sa.acked = int64(lo - seg.base)
			if a.readEnd <= seg.base && !a.made {
				// Never read, it says: the later ones are mostly not
				// either, and each is opened only if it says it was
				// (wasRead). (A file made now, its old one lost or
				// damaged, tells nothing.)
				stop = true
			}
			continue
		}
		n, err := a.countSet(lo-seg.base, hi-seg.base)
		if err != nil {
			return err
		}
		sa.acked = int64(lo-seg.base) + n
		c.ackedAbove.Add(n)
		if n > 0 {
			c.ackedMax = max(c.ackedMax, hi-1)
		}
	}
	return c.advanceFloorLocked(nil)
}

// wasRead reports whether the cursor's bitmap of seg exists and says some
// of seg was handed out (readEnd past its base), reading its header alone:
// loadAcks asks it of the segments past the first bitmap that says it was
// never read. Bitmaps reach the disk in no order a power cut respects
// (syncAcks fsyncs oldest first, but the kernel writes a dirty mapped page
// back when it likes, and a round fsyncs retired ones first), so a later
// bitmap can be durable with bits set while an earlier one's raised
// readEnd was lost; left uncounted, those records were delivered again,
// their Acks refused as already acknowledged, and Depth never came back to
// 0. A bitmap missing, never written or damaged counts as not read: what
// it held is delivered again, as ackFor does with it.
func (c *Cursor) wasRead(seg *segment) bool {
	head, err := readHead(c.log.fs, c.ackPath(seg), ackHeaderSize)
	if err != nil || len(head) < ackHeaderSize {
		return false
	}
	readEnd, _, err := decodeAckHeader(head, seg.base)
	return err == nil && readEnd > seg.base
}

// Ack acknowledges a record returned by [Cursor.Read]. Acknowledgements
// may come in any order. When Ack returns nil the acknowledgement is
// recorded in the segment's acknowledgement file, in the kernel: after a
// crash of the process the record is not delivered again to this cursor
// (after a power cut, only acknowledgements since the last fsync may be
// lost). The read cursor advances past the oldest record not yet
// acknowledged, and a segment every record of which every cursor has
// acknowledged is deleted (or retained, by Options). It returns
// [ErrNotInFlight] for a seq not handed out or already acknowledged.
func (c *Cursor) Ack(seq uint64) error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed || c.log.isClosed.Load() {
		// Close has released the files and the directory.
		return ErrClosed
	}
	if seq < c.ackFloor.Load() || seq >= c.rd.seq {
		return fmt.Errorf("%w: seq %d", ErrNotInFlight, seq)
	}
	// Acks mostly land in the segment the last one did.
	sa := c.lastAcked
	if sa == nil || seq < sa.seg.base || !sa.holds(seq) {
		seg := c.log.segmentAt(seq)
		if seg == nil || seg.gone.Load() {
			return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
		}
		sa = c.state(seg)
		c.lastAcked = sa
	}
	if sa.seg.gone.Load() {
		return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
	}
	was, err := c.markAckedLocked(sa, seq)
	if err != nil {
		return fmt.Errorf("diskqueue: ack %d: %w", seq, err)
	}
	if was {
		return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
	}
	c.acks.addOwned(1)
	return nil
}

// Unacknowledged is [Log.Scan] of the records with from <= seq < to that
// this cursor has not acknowledged (those out of order above the read
// cursor, before a restart too, are left out, and so are those
// [Log.Compact] removed), as Read would hand them out. It moves no cursor.
func (c *Cursor) Unacknowledged(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for rec, err := range c.log.Scan(max(from, c.ackFloor.Load()), to) {
			if err == nil && c.acknowledged(rec.Seq) {
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
func (c *Cursor) acknowledged(seq uint64) bool {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if seq < c.ackFloor.Load() {
		return true
	}
	seg := c.log.segmentAt(seq)
	if seg == nil || seg.gone.Load() {
		return seg != nil
	}
	a, err := c.ackFor(seg)
	if err != nil {
		return false
	}
	set, _ := a.isSet(seq - seg.base)
	return set
}
