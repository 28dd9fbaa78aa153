package channel

import (
	"context"
	"errors"
	"time"
)

// The timer store (Options.Timers; spillq.Open gives every queue one) is
// where deferred messages wait beside a channel's Backend: a message put
// with a delay, requeued with a delay, or read from the backend with its due
// time still ahead is written to the timer store, with its due time and
// attempts, and then its backend record (if any) is acknowledged, after a
// Sync of the timer store's Log that covers the new record (settleMoves). So
// no deferred message holds a record in the backend (but the keyed ones the
// package doc's Deferral section names), and the backend's segments go as
// soon as their undeferred messages are finished; a crash between the two
// writes leaves the message in both, to be delivered twice, never lost.
//
// The channel holds in memory the due time and seq of at most
// Options.MaxDeferredInMemory of them, the earliest due; the others are on
// the timer store only, and the channel finds them again by reading it
// through (its Cursor's Unacknowledged) when those in memory are used up,
// and once at New (a restart): a cost that grows with what is deferred,
// never with the backend's backlog. It reads a due message by seq (the
// Log's ReadAt). A released message's record is acknowledged when the
// message is finished (or dead-lettered), or replaced by a new one if it is
// requeued with a delay again.

// DefaultMaxDeferredInMemory is Options.MaxDeferredInMemory's default.
const DefaultMaxDeferredInMemory = 100_000

// deferToTimers stores m, deferred until due, in the timer store, then
// acknowledges the record it came from. If the store fails, m waits in the
// memory heap as it would without one (its record, if any, stays). The
// caller makes sure Close waits for it: it holds putMu shared, or is one of
// the goroutines Close waits for.
func (c *Channel) deferToTimers(ctx context.Context, m *Message, due int64) error {
	m.due = due
	// ErrNotDurable: stored, and in the timer set (putTimer), only not
	// fsynced yet: kept in memory as well, it came twice.
	_, err := c.putTimer(ctx, m)
	if !stored(err) {
		c.log.Warn("channel: cannot store a deferred message in the timer store; it waits in memory", "id", m.ID.String(), "err", err)
		c.deferInMemory(m)
		return err
	}
	if m.Key != nil && c.opts.Keys == KeyDedup && m.src == srcMemory {
		// Its key state entry knew it in memory only, which a snapshot
		// leaves out (a crash loses such a message): in the timer store
		// it survives one, and a restart must know its key (the other
		// policies keep a keyed message out of the timer store).
		c.keys.stored(m.Key, m.ID, 0, srcTimers)
	}
	if m.src != srcMemory {
		c.queueMove(m)
		return nil
	}
	c.ackRecord(m, "deferred to the timer store")
	return nil
}

// putTimer writes m, which carries its due time, to the timer store and
// tracks it. It returns the record's seq there.
func (c *Channel) putTimer(ctx context.Context, m *Message) (uint64, error) {
	t := c.timers
	buf := pooledEnvelope(m)
	t.putMu.RLock()
	defer t.putMu.RUnlock()
	seq, err := t.store.put(ctx, *buf)
	freeEnvelope(buf)
	if !stored(err) {
		return 0, err
	}
	c.mu.Lock()
	t.add(timerEntry{due: m.due, seq: seq})
	c.mu.Unlock()
	c.wakeClock()
	return seq, err
}

// deferInMemory puts m on the memory heap of deferred messages.
func (c *Channel) deferInMemory(m *Message) {
	c.mu.Lock()
	c.deferred.push(m)
	c.mu.Unlock()
	c.wakeClock()
}

// releaseTimers reads the deferred messages in the timer store that are
// due and puts them on the ready list; it reports whether it did.
func (c *Channel) releaseTimers(now int64) bool {
	t := c.timers
	c.mu.Lock()
	due := t.popDue(now, nil)
	c.startRefillLocked()
	tgen, gen := t.gen, c.gen.Load()
	c.mu.Unlock()
	if len(due) == 0 {
		return false
	}
	msgs := make([]*Message, 0, len(due))
	var retry []timerEntry
	for _, e := range due {
		body, err := t.store.get(e.seq)
		var m *Message
		if err == nil {
			m, err = decodeEnvelope(body)
		}
		switch {
		case err == nil:
			m.ch, m.src, m.seq, m.gen, m.due = c, srcTimers, e.seq, gen, 0
			if c.jrn != nil && c.jrn.ntimers.Load() > 0 {
				c.journalTimer(m)
			}
			msgs = append(msgs, m)
		case errors.Is(err, ErrBadEnvelope):
			c.cons.badRecords.Add(1)
			c.log.Warn("channel: dropping a timer store record that is not a message", "seq", e.seq, "err", err)
			c.ackRecord(&Message{src: srcTimers, seq: e.seq}, "not a message")
		default:
			c.log.Warn("channel: cannot read a deferred message from the timer store; trying again in a second", "seq", e.seq, "err", err)
			retry = append(retry, timerEntry{due: now + int64(time.Second), seq: e.seq})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.gen != tgen {
		return false // emptied meanwhile: so are these
	}
	for _, e := range retry {
		delete(t.out, e.seq)
		t.add(e)
	}
	for _, m := range msgs {
		c.ready.addLocked(m)
	}
	// After them, so a receiver let through finds them first; one whose
	// read failed is retried later, behind what comes meanwhile.
	c.releaseHeldLocked()
	return len(msgs) > 0
}

// TimerStats is a snapshot of a channel's deferred-message bookkeeping, for
// tests and diagnostics.
type TimerStats struct {
	InMemory int   // entries held in memory (due time and seq)
	Max      int   // Options.MaxDeferredInMemory
	Released int   // released for delivery, record not yet acknowledged
	Refills  int64 // reads of the timer store (one at New)
	Scanned  int64 // records those reads went through
	// Fallback is the deferred messages held whole in memory: without a
	// timer store, or where it failed.
	Fallback int
}

// TimerStats returns the channel's deferred-message bookkeeping; all zero
// but Fallback without a timer store.
func (c *Channel) TimerStats() TimerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := TimerStats{Fallback: len(c.deferred)}
	if t := c.timers; t != nil {
		st.InMemory, st.Max, st.Released = len(t.heap), t.max, len(t.out)
		st.Refills, st.Scanned = t.refills, t.scanned
	}
	return st
}
