package diskqueue

import (
	"cmp"
	"fmt"
	"slices"
)

// A cursor outlives its readers: a topic's channel reads ahead of its
// consumers, and when it closes, the records it read and did not hand to
// anyone are still in flight on the cursor, past its read position. Unread
// gives them back, so that the next reader over the cursor gets them first
// (without, they would come again only after the log is reopened).

// Floor returns the cursor's oldest record not yet acknowledged: every
// record below it is acknowledged by this cursor. It takes no lock.
func (c *Cursor) Floor() uint64 { return c.ackFloor.Load() }

// Unread gives back records that [Cursor.Read] or [Cursor.ReadBatch]
// handed out and that are not acknowledged, for the next Read or ReadBatch
// to hand out again first, in seq order, before anything the cursor has not
// read yet, waking a Read or ReadBatch that waits. They stay in flight meanwhile ([Cursor.Depth] counts them as
// before). The cursor keeps the records' bodies: do not change them after.
//
// A record below the floor by then (acknowledged since it was read, or
// emptied by [Cursor.Empty]) is dropped, here or when its turn comes; one
// the drop-when-full policy gave up above the floor is handed out, and
// [Cursor.Discarded] tells it. A seq the cursor has not handed out is
// refused with [ErrNotInFlight], and then none of recs is given back.
func (c *Cursor) Unread(recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	c.readMu.Lock()
	next, floor := c.rd.seq, c.ackFloor.Load()
	c.readMu.Unlock()
	keep := make([]Record, 0, len(recs))
	for _, r := range recs {
		if r.Seq >= next {
			return fmt.Errorf("%w: unread of seq %d, which the cursor has not handed out (it reads %d next)", ErrNotInFlight, r.Seq, next)
		}
		if r.Seq >= floor {
			keep = append(keep, r)
		}
	}
	c.backMu.Lock()
	defer c.backMu.Unlock()
	// In seq order with what is there already: records given back by two
	// readers (the first's not all read again before the second closed)
	// come in order.
	for _, r := range keep {
		i, found := slices.BinarySearchFunc(c.back, r.Seq, func(b Record, seq uint64) int { return cmp.Compare(b.Seq, seq) })
		if !found {
			c.back = slices.Insert(c.back, i, r)
		}
	}
	c.backN.Store(int32(len(c.back)))
	// A reader waiting for the next write takes them now: it looks at
	// backN after it registers, and this wakes it if it registered first.
	c.log.written.Notify()
	return nil
}

// readBack moves up to len(dst) records given back by Unread into dst,
// oldest first, leaving out those acknowledged since (below the floor), and
// returns how many it moved.
func (c *Cursor) readBack(dst []Record) int {
	c.backMu.Lock()
	defer c.backMu.Unlock()
	floor := c.ackFloor.Load()
	n := 0
	for len(c.back) > 0 && n < len(dst) {
		r := c.back[0]
		c.back[0] = Record{}
		c.back = c.back[1:]
		if r.Seq < floor {
			continue
		}
		dst[n] = r
		n++
	}
	if len(c.back) == 0 {
		c.back = nil
	}
	c.backN.Store(int32(len(c.back)))
	return n
}

// Discarded reports whether seq, which the cursor handed out and its reader
// has not acknowledged, was acknowledged since by someone else: by
// [Cursor.Empty], or given up by the drop-when-full policy. Below the floor
// that is certain; above it only the policy, which gives up a segment
// behind one a reader holds, can have, and then the bitmap says. Without a
// drop since Open it costs two atomic loads.
func (c *Cursor) Discarded(seq uint64) bool {
	if seq < c.ackFloor.Load() {
		return true
	}
	return c.dropped.Load() > 0 && c.acknowledged(seq)
}

// OwnCursor returns the queue's own cursor: the one Read, ReadBatch and Ack
// use, for callers that take a [Cursor] (a channel's store). It is the
// queue's to close.
func (q *Queue) OwnCursor() *Cursor { return q.c }
