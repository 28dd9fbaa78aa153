package memlog

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"

	"github.com/spillq/spillq/diskqueue"
)

// Cursor is one reader's position in a [Log], with the contract of
// [diskqueue.Cursor]. Its state is under the log's lock.
type Cursor struct {
	log *Log
	// floor is the oldest record not acknowledged; next the next record
	// ReadBatch hands out (after back).
	floor, next uint64
	// acked holds the acknowledged records at or above floor.
	acked map[uint64]bool
	// back holds the records Unread gave back, in seq order.
	back []diskqueue.Record
}

func (c *Cursor) ackedLocked(seq uint64) bool { return seq < c.floor || c.acked[seq] }

// ReadBatch waits for the next record, then stores it and those ready
// after it in dst.
func (c *Cursor) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	l := c.log
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return 0, diskqueue.ErrClosed
		}
		n := 0
		for len(c.back) > 0 && n < len(dst) {
			r := c.back[0]
			c.back = c.back[1:]
			if !c.ackedLocked(r.Seq) {
				dst[n] = r
				n++
			}
		}
		for n < len(dst) && c.next < uint64(len(l.records)) {
			seq := c.next
			c.next++
			if !c.ackedLocked(seq) {
				dst[n] = l.records[seq]
				n++
			}
		}
		wake := l.wake.Wait()
		l.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Ack acknowledges a record ReadBatch handed out; [diskqueue.ErrNotInFlight]
// for one it has not, or acknowledged already.
func (c *Cursor) Ack(seq uint64) error {
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return diskqueue.ErrClosed
	}
	if seq >= c.next || c.ackedLocked(seq) {
		return fmt.Errorf("%w: memlog: seq %d", diskqueue.ErrNotInFlight, seq)
	}
	c.acked[seq] = true
	for c.acked[c.floor] {
		delete(c.acked, c.floor)
		c.floor++
	}
	return nil
}

// Acknowledged reports whether this cursor has acknowledged seq.
func (c *Cursor) Acknowledged(seq uint64) bool {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return c.ackedLocked(seq)
}

// Floor is the oldest record this cursor has not acknowledged.
func (c *Cursor) Floor() uint64 {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return c.floor
}

// Depth is how many records this cursor has not acknowledged.
func (c *Cursor) Depth() int64 {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return int64(uint64(len(c.log.records))-c.floor) - int64(len(c.acked))
}

// Passed is zero: a memlog has no damage and no compaction.
func (c *Cursor) Passed() int64 { return 0 }

// Empty acknowledges every record.
func (c *Cursor) Empty() error {
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return diskqueue.ErrClosed
	}
	c.floor = uint64(len(l.records))
	c.next = c.floor
	clear(c.acked)
	c.back = nil
	return nil
}

// Unread gives back records handed out and not acknowledged, for the next
// ReadBatch to hand out first, in seq order; [diskqueue.ErrNotInFlight] for
// a seq not handed out, giving back none.
func (c *Cursor) Unread(recs []diskqueue.Record) error {
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		if r.Seq >= c.next {
			return fmt.Errorf("%w: memlog: unread of seq %d, not handed out", diskqueue.ErrNotInFlight, r.Seq)
		}
	}
	for _, r := range recs {
		if c.ackedLocked(r.Seq) {
			continue
		}
		i, found := slices.BinarySearchFunc(c.back, r.Seq, func(b diskqueue.Record, seq uint64) int { return cmp.Compare(b.Seq, seq) })
		if !found {
			c.back = slices.Insert(c.back, i, r)
		}
	}
	l.notifyLocked() // a reader waiting takes them now, as a Put's record
	return nil
}

// Discarded reports whether seq was acknowledged (by Empty: the reader
// that holds it did not).
func (c *Cursor) Discarded(seq uint64) bool { return c.Acknowledged(seq) }

// Unacknowledged yields the records with from <= seq < to this cursor has
// not acknowledged, a record at a time as it goes.
func (c *Cursor) Unacknowledged(from, to uint64) iter.Seq2[diskqueue.Record, error] {
	return c.log.scan(from, to, c.ackedLocked)
}
