package channel

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A message read from the backend (or the timer store) and deferred is
// moved: stored again in the timer store, with its due time, and then its
// old record acknowledged. Not at once: settleMoves says why the timer
// store's Sync must come between the two, and one Sync for each move
// (Requeue waiting for it) made a retry a hundred times slower. So moves
// wait in a moveQueue, and the clock goroutine settles what waits there,
// one Sync for all, moveSettleWait after the first came (settleDue).

// moveSettleWait is how long a moved message's old record waits for others
// before one sync of the timer store lets the clock acknowledge them all.
// It bounds what a crash delivers twice: a message moved within it (and
// the timer store's fsync after) comes from both stores.
const moveSettleWait = 2 * time.Millisecond

// moveQueue holds the messages moved to the timer store whose old records
// wait to be acknowledged until the timer store has made the new ones
// durable. Its lock is a leaf.
type moveQueue struct {
	mu      sync.Mutex
	pending []*Message
	// n is len(pending), for a look without mu (settleBefore).
	n     atomic.Int64
	since time.Time // when the first of pending came
}

// add queues m, reporting whether it is the first waiting: the clock
// then has a settling to schedule.
func (q *moveQueue) add(m *Message) (first bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	first = len(q.pending) == 0
	if first {
		q.since = time.Now()
	}
	q.pending = append(q.pending, m)
	q.n.Store(int64(len(q.pending)))
	return first
}

// take returns what waits to be settled, leaving none.
func (q *moveQueue) take() []*Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	q.n.Store(0)
	return out
}

// due returns when what waits is to be settled, and false when nothing
// waits.
func (q *moveQueue) due() (time.Time, bool) {
	if q.n.Load() == 0 {
		return time.Time{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.since.Add(moveSettleWait), len(q.pending) > 0
}

// queueMove hands m, just stored in the timer store, to the clock, which
// acknowledges its old record once the timer store has made the new one
// durable (settleDue).
func (c *Channel) queueMove(m *Message) {
	if c.moves.add(m) {
		c.wakeClock() // to schedule the settling
	}
}

// takeMoves returns what waits to be settled.
func (c *Channel) takeMoves() []*Message { return c.moves.take() }

// settleBefore settles the moves waiting now, before the caller
// acknowledges a timer store record: a message moved there can be due,
// delivered and finished before the clock settles it, and its new record
// acknowledged while its old one was not would bring it back after a
// crash, finished. Rare (a delay shorter than moveSettleWait), it costs a
// Sync of the timer store then.
func (c *Channel) settleBefore() {
	if c.moves.n.Load() != 0 {
		c.settleDue()
	}
}

// settleDue is the clock's settling (moveQueue): one sync of the timer
// store for all the moves that wait. What waits when the channel closes
// is settled by Close (settleQueuedMoves), after the goroutines that queue
// moves are done.
func (c *Channel) settleDue() {
	c.settleMoves(c.closeCtx, c.timers.store.log, c.takeMoves(), "deferred to the timer store")
}

// settleMoves acknowledges the old records of msgs, each just stored again
// in a store (moved: to the timer store when deferred, to the backend at
// Close), once the store's Log has made them durable (its Sync; nil, or a
// Sync unsupported, acknowledges at once). Acknowledged at once, an old
// record's acknowledgement could reach the disk before the new record did
// (each store syncs on its own tick, and the kernel writes mapped pages back
// in its own order), and a power cut then lost a message put and fsynced
// long before. If the sync fails, the old records stay: after a restart
// those messages come twice, never not at all. It returns the first error.
func (c *Channel) settleMoves(ctx context.Context, log Log, msgs []*Message, why string) error {
	if len(msgs) == 0 {
		return nil
	}
	// Not cut short by Close (which cancels the pump's and Requeue's ctx,
	// then waits for them): given up, the old records stayed and came
	// again after the restart.
	if _, err := syncLog(context.WithoutCancel(ctx), log); err != nil {
		c.log.Warn("channel: cannot make moved messages durable; their old records stay, and they are delivered again after a restart", "messages", len(msgs), "why", why, "err", err)
		return err
	}
	var first error
	for _, m := range msgs {
		if m.gen != c.gen.Load() {
			continue // Empty discarded its old record (and its new one)
		}
		first = cmp.Or(first, c.ackRecord(m, why))
	}
	return first
}
