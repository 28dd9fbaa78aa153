package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Giving up one cursor's records without touching the others':
// [Cursor.Empty] drops its whole backlog, and the drop-when-full policy
// ([Cursor.SetDropWhenFull]) drops its oldest segments when the log
// reaches MaxDiskBytes. Both run on the writer goroutine (Log.request), so
// they never race a seal, a deletion or a store of the cursor.

// Empty acknowledges, for this cursor alone, every record put before the
// call, and moves its read position to the end of the log: its backlog is
// discarded, while every other cursor keeps its records. The cursor is
// stored (fsynced, unless NoSync) before Empty returns, so neither a crash
// nor a power cut brings the emptied records back to it. Sealed segments
// that only this cursor still needed are deleted before it returns, unless
// retention keeps them; the active segment goes, as always, once it has
// rolled.
//
// Records handed out by Read and not yet acknowledged are emptied too:
// acknowledging them afterwards returns [ErrNotInFlight]. Reads blocked
// meanwhile go on waiting and get only records put after Empty. The
// cursor's Acks count is not changed.
//
// Empty of a deleted cursor, or on a closed log, returns [ErrClosed]; on a
// read-only log, [ErrReadOnly].
func (c *Cursor) Empty() error {
	if c.log.readOnly {
		return ErrReadOnly
	}
	return c.log.request(c.empty)
}

// empty carries out Empty on the writer goroutine.
func (c *Cursor) empty() error {
	l := c.log
	l.mu.Lock()
	if l.closed || l.t == nil {
		l.mu.Unlock()
		return ErrClosed
	}
	// Under l.mu no record is appended, so the end read here is the end
	// of everything put before the call.
	t := l.t
	c.readMu.Lock()
	if c.closed {
		c.readMu.Unlock()
		l.mu.Unlock()
		return ErrClosed
	}
	c.moveToEndLocked(t)
	c.readMu.Unlock()
	l.mu.Unlock()
	if err := c.store(); err != nil {
		return fmt.Errorf("diskqueue: empty cursor %q: %w", c.name, err)
	}
	l.housekeep(time.Now())
	return nil
}

// moveToEndLocked puts the cursor's floor and reader at the end of the
// active segment t, with nothing acknowledged above the floor and nothing
// in flight. The caller holds l.mu and c.readMu.
func (c *Cursor) moveToEndLocked(t *tail) {
	end := t.end
	if err := c.rd.moveTo(t.seg, t.size, end); err != nil {
		// The active segment's read handles are made with it, so this
		// does not happen; a reader without a segment finds it anyway.
		c.rd.forget(end)
	}
	c.ackedAbove.Store(0) // before the floor rises: see Depth
	c.ackFloor.Store(end)
	c.handed.Store(c.acks.Load()) // nothing in flight
	c.lastAcked = nil
	c.lastRead = nil
	for seg, sa := range c.segs {
		// Each segment's count includes the records below the floor.
		sa.acked = int64(seg.endNow() - seg.base)
		if seg != t.seg {
			c.retire(sa) // the floor has passed it
		}
	}
}

// SetDropWhenFull sets what the cursor does when a Put finds the log at
// Options.MaxDiskBytes. With drop false (the default) the cursor holds its
// records: Put returns [ErrDiskFull], or waits with BlockWhenFull, until
// consumers free space. With drop true the cursor gives records up
// instead, so one abandoned cursor cannot stop the log.
//
// The policy is not stored: whoever opens the cursor sets it each time.
//
// When a Put finds the budget spent and some cursor drops when full, the
// writer goroutine deletes sealed segments, oldest first, until the record
// fits: first those every cursor has acknowledged (kept by retention,
// which the budget outranks), then those no holding cursor needs any more
// (every cursor set to hold has acknowledged all of it). For each dropping
// cursor, the records of such a segment it had not acknowledged are
// acknowledged on its behalf, counted in [CursorStats].Dropped and
// [Stats].DroppedRecords, and logged once per segment at Warn; its floor
// and read position move past the segment, and its records of the segment
// in flight are no longer: acknowledging one returns [ErrNotInFlight]. The
// cursors are stored before the segment's files are removed (a segment
// behind an older one still held leaves a tombstone, as retention's do).
// The active segment is rolled first when it is the only one left that
// only dropping cursors hold. Then the Put retries. If nothing can be
// given up (a holding cursor still needs every sealed segment, or the
// record would not fit an empty log), Put fails or waits as it would
// without the policy. A file system that is full (ENOSPC) is not a reason
// to drop: only the budget is.
func (c *Cursor) SetDropWhenFull(drop bool) { c.dropWhenFull.Store(drop) }

// mayMakeRoomLocked reports whether makeRoom may find something to do
// when the budget is spent: a cursor is set to drop when full; retention
// or HoldFrom may keep segments every cursor has acknowledged (makeRoom
// deletes those retention keeps, which the budget outranks, and tells the
// holder of the others); every record of the active segment is
// acknowledged (makeRoom rolls it, so it can go); or acknowledgements
// were made since the writer last looked for segments to delete, or it is
// looking now (it deletes them in its own time, and Put would fail
// meanwhile although the space is free to take). Otherwise a Put at the
// budget fails (or waits) at once, without a round trip to the writer.
// The caller holds l.mu.
func (l *Log) mayMakeRoomLocked() bool {
	if l.opts.RetainBytes > 0 || l.opts.RetainAge > 0 || l.heldFrom.Load() > 0 {
		return true
	}
	if l.consumedLocked() || l.acksSum() != l.acksLooked.Load() || l.ackedSealing.Load() {
		return true
	}
	for _, c := range l.cursors {
		if c.dropWhenFull.Load() {
			return true
		}
	}
	return false
}

// dropForRoom asks the writer goroutine to make room for a frame of n
// bytes (makeRoom), and reports whether there is room now. Put calls it
// only once it has found the budget spent, so that it is refused for want
// of space only while nothing it outranks holds any. It gives up when ctx
// ends (the writer may be in a long fsync).
func (l *Log) dropForRoom(ctx context.Context, n int64) bool {
	room := false
	err := l.requestCtx(ctx, func() error {
		room = l.makeRoom(n)
		return nil
	})
	return err == nil && room
}

// makeRoom deletes segments, oldest first, until a frame of n bytes fits
// the disk budget or nothing more may go (the active segment rolled first
// if every record in it is acknowledged): first those every cursor has
// acknowledged (retention keeps them, and the budget outranks it), then
// those only drop-when-full cursors still hold; never those HoldFrom
// keeps, whose holder it tells instead (HoldPressure).
// It reports whether the frame fits now (housekeeping since the Put looked
// may have made room already). Only the writer goroutine calls it.
func (l *Log) makeRoom(n int64) bool {
	if l.opts.MaxDiskBytes == 0 {
		return false
	}
	// Segments rotated out must be sealed before they can go.
	l.sealPending()
	// A consumed active segment is rolled first, so that the records put
	// from now on do not share a segment with acknowledged ones, which
	// would keep their space until the new ones are acknowledged too.
	rolled := l.rollConsumed()
	for {
		l.mu.Lock()
		full := l.fullLocked(n) != nil
		// A record that would not fit even an empty log must not cost the
		// dropping cursors everything.
		fits := emptyLogBytes(len(l.cursors))+l.budgetLocked(n) <= l.opts.MaxDiskBytes
		l.mu.Unlock()
		if !full || !fits {
			return !full
		}
		segs, i, held := l.nextToGiveUp()
		if held {
			// Acknowledged segments HoldFrom keeps could make room: the
			// holder is to move the hold (spillq stores its key state).
			select {
			case l.holdPressure <- struct{}{}:
			default:
			}
		}
		if i < 0 {
			if rolled || !l.rollForDrop() {
				return false
			}
			rolled = true
			continue
		}
		if !l.giveUpSegment(segs, i) {
			return false
		}
	}
}

// nextToGiveUp returns l.segs and the index in it of the oldest sealed
// segment every cursor has acknowledged, or else of the oldest one every
// cursor holding its records has acknowledged and a drop-when-full cursor
// has not; -1 if there is neither. Segments HoldFrom keeps are passed over
// (a restart would miss what its holder rebuilds from them); held says
// whether one was.
func (l *Log) nextToGiveUp() (segs []*segment, i int, held bool) {
	cursors := *l.cursorList.Load()
	l.segMu.RLock()
	segs = l.segs
	l.segMu.RUnlock()
	if len(cursors) == 0 {
		return segs, -1, false // no consumer yet: the log holds everything for the first
	}
	all := make([]bool, len(segs))  // every cursor has acknowledged it
	hold := make([]bool, len(segs)) // every cursor holding its records has
	for i, s := range segs {
		all[i] = !s.writing.Load() && !s.gone.Load()
		hold[i] = all[i]
	}
	for _, c := range cursors {
		drop := c.dropWhenFull.Load()
		for i, d := range c.done(segs) {
			all[i] = all[i] && d
			hold[i] = hold[i] && (d || drop)
		}
	}
	for _, ok := range [][]bool{all, hold} {
		for i := 0; i < len(segs)-1; i++ { // never the active one
			if !ok[i] {
				continue
			}
			if l.held(segs[i]) {
				held = true
				continue
			}
			return segs, i, held
		}
	}
	return segs, -1, held
}

// rollConsumed is rollConsumedLocked, then the seal of the segment rolled
// out, so that it can go.
func (l *Log) rollConsumed() bool {
	l.mu.Lock()
	ok := l.rollConsumedLocked(false)
	l.mu.Unlock()
	if ok {
		l.sealPending()
	}
	return ok
}

// rollForDrop rolls the active segment when, of the cursors holding
// records in it, every one drops when full, so that it can be given up
// once sealed. It reports whether it rolled.
func (l *Log) rollForDrop() bool {
	l.mu.Lock()
	t := l.t
	ok := t != nil && !l.closed && l.writeErr == nil && t.end > t.seg.base
	holders := 0
	for _, c := range l.cursors {
		if !ok {
			break
		}
		if c.done([]*segment{t.seg})[0] {
			continue
		}
		ok = c.dropWhenFull.Load()
		holders++
	}
	ok = ok && holders > 0
	if ok {
		if err := l.rotateLocked(); err != nil {
			if !errors.Is(err, ErrDiskFull) {
				l.failLocked(err)
			}
			ok = false
		}
	}
	l.mu.Unlock()
	if ok {
		l.sealPending()
	}
	return ok
}

// giveUpSegment has every drop-when-full cursor give up segs[i] and
// deletes it, storing the cursors first. It reports whether the segment
// went: not if a cursor could not give it up, or one that holds its
// records appeared or started holding them meanwhile.
func (l *Log) giveUpSegment(segs []*segment, i int) bool {
	s := segs[i]
	for _, c := range *l.cursorList.Load() {
		if !c.dropWhenFull.Load() {
			continue
		}
		lost, err := c.giveUp(s)
		if err != nil {
			c.logger.Warn("diskqueue: cannot give up a segment to make room at MaxDiskBytes", "segment", s.base, "err", err)
			return false
		}
		if lost > 0 {
			// A named cursor's logger carries its name.
			c.logger.Warn("diskqueue: drop-when-full cursor gave up unacknowledged records to make room at MaxDiskBytes", "segment", s.base, "records", lost)
		}
	}
	for _, c := range *l.cursorList.Load() {
		if !c.done([]*segment{s})[0] {
			return false
		}
	}
	l.deleteAcknowledged(segs, []int{i})
	return true
}

// giveUp acknowledges on the cursor's behalf every record of seg (sealed)
// that it has not acknowledged, for the drop-when-full policy, and returns
// how many that was. Their bits are set as an Ack would set them, so the
// state on disk agrees with the counts whether or not the segment's files
// are deleted next; those in flight stop being so, and the floor and the
// reader move past seg when they were in it.
func (c *Cursor) giveUp(seg *segment) (int64, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	floor := c.ackFloor.Load()
	end := seg.endNow()
	if seg.gone.Load() || end <= floor {
		return 0, nil
	}
	a, err := c.ackFor(seg)
	if err != nil {
		return 0, err
	}
	lo, hi := max(floor, seg.base)-seg.base, end-seg.base
	// In flight: handed out (below the reader) and not acknowledged.
	var inFlight int64
	if read := min(max(c.rd.seq, seg.base), end) - seg.base; read > lo {
		set, err := a.countSet(lo, read)
		if err != nil {
			return 0, err
		}
		inFlight = int64(read-lo) - set
	}
	// Open counts the bits below readEnd only.
	if err := a.raiseReadEnd(end, seg.base); err != nil {
		return 0, err
	}
	lost, err := a.setRange(lo, hi)
	if err != nil {
		return 0, err
	}
	c.state(seg).acked = int64(hi)
	c.ackedAbove.Add(lost)
	c.ackedMax = max(c.ackedMax, end-1)
	c.handed.Add(-inFlight)
	c.dropped.Add(lost)
	c.log.droppedRecords.Add(lost)
	if c.rd.seq >= seg.base && c.rd.seq < end {
		c.rd.forget(end) // found again from end by the next Read
	}
	if err := c.advanceFloorLocked(nil); err != nil {
		c.logger.Warn("diskqueue: cannot advance the read cursor yet", "seq", c.ackFloor.Load(), "err", err)
	}
	return lost, nil
}
