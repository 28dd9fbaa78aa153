package diskqueue

import (
	"fmt"
	"time"
)

// Giving up one cursor's records without touching the others':
// [Cursor.Empty] drops its whole backlog. Both run on the writer
// goroutine (Log.request), so they never race a seal, a deletion or a
// store of the cursor.

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
	if err := c.rd.reset(t.seg, t.size, end); err != nil {
		// The active segment's read handles are made with it, so this
		// does not happen; a reader without a segment finds it anyway.
		c.rd.seg, c.rd.seq = nil, end
	}
	c.ackFloor.Store(end)
	c.ackedAbove.Store(0)
	c.inFlight.Store(0)
	c.lastAcked = nil
	for seg, sa := range c.segs {
		// Each segment's count includes the records below the floor.
		sa.acked = int64(seg.endNow() - seg.base)
		if seg != t.seg {
			c.retire(sa) // the floor has passed it
		}
	}
}
