package channel

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// A consumer's answers to a delivered message: Finish, Requeue (and Retry,
// which carries the cause), Release, Fail and Touch, and what the channel
// does with each.

// Finish acknowledges a message: it is done and will not be delivered
// again.
func (m *Message) Finish() error {
	if m.acker != nil {
		return m.acker.Finish(m)
	}
	c := m.ch
	if err := c.land(m); err != nil {
		return err
	}
	return c.finished(m)
}

// land takes m out of flight for an answer that ends its delivery here,
// or says why it cannot.
func (c *Channel) land(m *Message) error {
	f := c.flightFor(m)
	f.mu.Lock()
	landed := f.land(m)
	f.mu.Unlock()
	if !landed {
		return c.notInFlight(m)
	}
	return nil
}

func (c *Channel) finished(m *Message) error {
	n := c.cons.finishes.Add(1)
	c.recordLatency(m, n)
	defer c.keyDone(m)
	if m.src != srcMemory {
		if err := c.ack(m); err != nil {
			return fmt.Errorf("channel: acknowledge message %s in the backend: %w", m.ID, err)
		}
	}
	return nil
}

// dropSuperseded ends m, superseded by a newer message with its key: it
// will never be delivered. (Counted by whoever decided it.)
func (c *Channel) dropSuperseded(m *Message) {
	c.ackRecord(m, "superseded by a newer message with its key")
	c.keyDone(m)
}

// keyDone tells the key policy m will not be delivered again; under
// KeySerial the next message of its key, if one waits, goes to the ready
// list.
func (c *Channel) keyDone(m *Message) {
	if c.keys == nil || m.Key == nil {
		return
	}
	next := c.keys.done(m.Key, m.ID)
	if next == nil {
		return
	}
	c.mu.Lock()
	c.ready.addLocked(next)
	c.mu.Unlock()
	c.ready.ring()
}

// timeEvery is how many finishes share one clock read when they come fast.
const timeEvery = 8

// recordLatency counts m's Put-to-Finish latency; n is this finish's
// number. A clock read costs ~50 ns on a virtual machine's clock, a fifth
// of the memory path, so while there is a backlog (m was put before the last
// timed finish) only one finish in timeEvery is timed, and the others are
// counted with the latency of the last timed one: the count stays exact
// and the shape (and the sum) is a 1-in-8 sample of a busy channel. Without
// a backlog every finish is timed. BenchmarkBacklog/backlog=512 justifies
// it: timing every finish there costs 13% more per message.
func (c *Channel) recordLatency(m *Message, n int64) {
	put := m.Timestamp.UnixNano()
	if n%timeEvery != 1 && put < c.cons.lastTimed.Load() {
		c.latency.Record(time.Duration(c.cons.lastLatency.Load()))
		return
	}
	// c.stamp is one clock read; time.Since would take two for a message
	// read back from disk, whose timestamp has no monotonic reading.
	now := c.stamp()
	d := now.Sub(m.Timestamp)
	c.latency.Record(d)
	c.cons.lastLatency.Store(int64(d))
	c.cons.lastTimed.Store(now.UnixNano())
}

// FinishAll finishes a batch of messages, for consumers that work in
// batches. It returns the first error; the other messages are finished
// regardless.
func (c *Channel) FinishAll(msgs []*Message) error {
	var first error
	for _, m := range msgs {
		if err := m.Finish(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Channel) notInFlight(m *Message) error {
	if c.isClosed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("%w: %s", ErrNotInFlight, m.ID)
}

// Requeue gives a message back for another delivery, after delay (zero
// means at once). It is [Message.Retry] without a cause.
func (m *Message) Requeue(delay time.Duration) error { return m.Retry(delay, nil) }

// Retry gives a message whose delivery failed back for another delivery,
// after delay (zero means at once), counting the attempt. A message that
// has had Options.MaxAttempts deliveries goes to the dead-letter handler
// instead, with a reason that wraps both [ErrMaxAttempts] and cause (the
// error that failed this attempt, if not nil), so the handler sees why
// the last attempt failed. Requeued messages are delivered ahead of the
// memory buffer: the one exception to put order.
//
// With a delay and a timer store, the message is stored again there with
// its due time, and its old record acknowledged once that store has
// fsynced it (milliseconds, in the background): a crash of the process in
// between delivers it twice, the old copy after the restart without the
// delay.
func (m *Message) Retry(delay time.Duration, cause error) error {
	if m.acker != nil {
		return m.acker.Requeue(m, delay, cause)
	}
	return m.ch.requeue(m, delay, cause, true)
}

// requeue lands m and gives it back for another delivery after delay;
// spend says whether its delivery counts as an attempt (Retry) or not
// (Release), and only a spent one may dead-letter it.
func (c *Channel) requeue(m *Message, delay time.Duration, cause error, spend bool) error {
	// (Not when out of attempts: the dead-letter handler must not run
	// holding putMu, as it may Put.)
	toTimers := delay > 0 && c.toTimers(m) && !(spend && c.exhausted(m)) && !c.keepsSerialPlace(m)
	if toTimers {
		// Held until the message lands, so Close, which waits for it,
		// cannot miss the message while it is on its way to the timer
		// store. Once Close has begun, the message goes to memory as it
		// would without a timer store, and Close writes it.
		c.prod.putMu.RLock()
		defer c.prod.putMu.RUnlock()
		toTimers = !c.isClosed.Load()
	}
	f := c.flightFor(m)
	f.mu.Lock()
	if !f.land(m) {
		f.mu.Unlock()
		return c.notInFlight(m)
	}
	if spend {
		c.cons.requeues.Add(1)
		if c.exhausted(m) {
			f.mu.Unlock()
			c.deadLetter(m, OutOfAttemptsReason(m.Attempts, cause))
			return nil
		}
	} else {
		c.cons.releases.Add(1)
	}
	again := m.redelivery()
	if !spend {
		again.unspend()
		c.journalUnspent(again)
	}
	if toTimers {
		f.mu.Unlock()
		// A failure leaves the message deferred in memory: Requeue has
		// done what it promised.
		c.deferToTimers(c.closeCtx, again, unixNano(time.Now().Add(delay)))
		return nil
	}
	c.requeueLanded(f, again, delay)
	return nil
}

// requeueLanded puts again, the next delivery of a message that just
// landed from flight shard f, on the ready list (or deferred, after
// delay), and lets go of f. The shard is still held while it goes there:
// see flightList for why.
func (c *Channel) requeueLanded(f *flightList, again *Message, delay time.Duration) {
	c.mu.Lock()
	if delay > 0 {
		again.due = unixNano(time.Now().Add(delay))
		c.deferred.push(again)
	} else {
		c.ready.addLocked(again)
	}
	c.mu.Unlock()
	f.mu.Unlock()
	if delay > 0 {
		c.wakeClock()
	} else {
		c.ready.ring()
	}
}

// Release gives a message back without counting its delivery as an
// attempt, for another delivery after delay (zero means at once, ahead of
// the memory buffer), with the attempts it had before this delivery: for
// a consumer that took it and then must stop before it could do the work
// (a worker shutting down, a deploy), or that is told to come back later
// (a snooze: a rate limit, a resource not ready). A consumer that keeps
// releasing a message keeps it from ever being dead-lettered, so release
// only work you did not try. [Channel.Close] does the same, at once, with
// every message still in flight. A delay is kept as Requeue keeps one.
//
// A message from another source ([NewMessage]) is released as its source
// allows: nsqd counts every delivery, so there it is a Requeue.
func (m *Message) Release(delay time.Duration) error {
	if m.acker != nil {
		return m.acker.Release(m, delay)
	}
	return m.ch.requeue(m, delay, nil, false)
}

// unspend takes back the attempt the message's last delivery counted.
func (m *Message) unspend() {
	if m.Attempts > 0 {
		m.Attempts--
	}
}

// Fail ends a message's delivery for good: it goes to the dead-letter
// handler now, whatever attempts it has left, with a reason that wraps
// both [ErrFailed] and cause. It is for a message that can never be
// processed (a body that does not parse, say), which would otherwise use
// up every attempt first.
func (m *Message) Fail(cause error) error {
	if m.acker != nil {
		return m.acker.Fail(m, cause)
	}
	c := m.ch
	if err := c.land(m); err != nil {
		return err
	}
	c.cons.failed.Add(1)
	c.deadLetter(m, FailedReason(cause))
	return nil
}

// FailedReason is the dead-letter reason of a message failed with cause
// ([Message.Fail]): [ErrFailed], wrapping cause if not nil. A source of
// its own ([Acker]) gives its dead-letter handler the same, so handlers
// see one set of reasons whatever the source.
func FailedReason(cause error) error {
	if cause == nil {
		return ErrFailed
	}
	return fmt.Errorf("%w: %w", ErrFailed, cause)
}

// OutOfAttemptsReason is the dead-letter reason of a message whose last
// attempt (its attempts-th) failed with cause ([Message.Retry]; nil: it
// timed out, or was requeued without one): [ErrMaxAttempts], wrapping
// cause if not nil. As FailedReason, for sources of their own too.
func OutOfAttemptsReason(attempts uint16, cause error) error {
	if cause == nil {
		return ErrMaxAttempts
	}
	return fmt.Errorf("%w (%d): last attempt: %w", ErrMaxAttempts, attempts, cause)
}

// Touch restarts a message's timeout, for work that takes longer than
// MsgTimeout.
func (m *Message) Touch() error {
	if m.acker != nil {
		return m.acker.Touch(m)
	}
	c := m.ch
	f := c.flightFor(m)
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.state != stateInFlight {
		return c.notInFlight(m)
	}
	f.unlink(m)
	storeMax(&c.now, c.monotonic())
	m.deadline = c.now.Load() + int64(c.opts.MsgTimeout)
	f.link(m)
	return nil
}

// redelivery copies a message for its next delivery, so the consumer that
// held it (and may still call Finish on it) has a pointer that is no longer
// in flight.
func (m *Message) redelivery() *Message {
	return &Message{
		ID: m.ID, Body: m.Body, Key: m.Key, Timestamp: m.Timestamp, Attempts: m.Attempts,
		ch: m.ch, expires: m.expires, seq: m.seq, src: m.src, gen: m.gen, jrec: m.jrec,
	}
}

// LastAttempt reports whether this delivery is the message's last: it has
// had Options.MaxAttempts deliveries, so a Retry or a timeout sends it to
// the dead-letter handler. Always false for a message from another source
// ([NewMessage]) and with unlimited attempts.
func (m *Message) LastAttempt() bool { return m.acker == nil && m.ch.exhausted(m) }

func (c *Channel) exhausted(m *Message) bool {
	return c.opts.MaxAttempts > 0 && m.Attempts >= c.opts.MaxAttempts
}

// deadLetterRetry is how long a message waits before it goes to the
// dead-letter handler again, after the handler returned an error.
const deadLetterRetry = time.Second

// deadLetter hands m to the dead-letter handler (or logs it), then
// acknowledges its backend record. If the handler fails, the record stays
// and the message waits deadLetterRetry to come round again: a dead-letter
// store that cannot take it loses nothing.
func (c *Channel) deadLetter(m *Message, reason error) {
	if c.opts.DeadLetter != nil {
		if err := c.opts.DeadLetter(m, reason); err != nil {
			c.deadLetterFailed(m, reason, err)
			return
		}
	} else {
		c.log.Warn("channel: dropping dead letter (set Options.DeadLetter to keep them)", "id", m.ID.String(), "attempts", m.Attempts, "reason", reason)
	}
	c.cons.deadLetters.Add(1)
	if err := c.ack(m); err != nil {
		c.log.Warn("channel: cannot acknowledge dead letter in the backend", "id", m.ID.String(), "err", err)
	}
	c.keyDone(m)
}

// deadLetterFailed keeps a message the dead-letter handler refused: it is
// deferred by deadLetterRetry, its record (if any) unacknowledged, and
// comes round again (dead-lettered at once if out of attempts; a message
// Fail sent is delivered again). Once Close has collected what the
// channel holds, it cannot be kept in memory: its record, if it has one,
// delivers it after a restart.
func (c *Channel) deadLetterFailed(m *Message, reason, err error) {
	c.cons.deadLetterErrors.Add(1)
	c.log.Warn("channel: dead-letter handler failed; the message is kept and tried again", "id", m.ID.String(), "reason", reason, "err", err, "retry", deadLetterRetry)
	again := m.redelivery()
	again.due = unixNano(time.Now().Add(deadLetterRetry))
	c.mu.Lock()
	closed := c.collected
	if !closed {
		c.deferred.push(again)
	}
	c.mu.Unlock()
	if closed {
		if m.src == srcMemory {
			c.log.Error("channel: dead letter refused by its handler while closing; it was in memory only and is lost", "id", m.ID.String(), "err", err)
		}
		return
	}
	c.wakeClock()
}

// keepsSerialPlace reports whether m, requeued with a delay, waits in
// memory with its record left in place rather than moving to the timer
// store: under KeySerial, on a channel of its own, a keyed message from
// the backend. It holds its key while it waits, and so must its record
// across a restart: moved to the timer store, due later, the key's next
// message, still in place in the backend, was delivered first by the next
// run, which holds no key. Its delay is then not kept by a restart (the
// record does not carry it): it comes again at once, first of its key.
//
// At most MaxDeferredInMemory wait so (each whole, in memory, its segment
// kept): past that one goes to the timer store, and a restart may deliver
// its key's next message ahead of it.
func (c *Channel) keepsSerialPlace(m *Message) bool {
	if c.opts.Keys != KeySerial || c.fan != nil || m.Key == nil || m.src != srcBackend {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.deferred) < c.opts.MaxDeferredInMemory
}

// ackRecord acknowledges the record m came from, if any, logging a failure
// (the message is then delivered again after a restart); why says what
// became of m.
func (c *Channel) ackRecord(m *Message, why string) error {
	err := c.ack(m)
	if err != nil {
		c.log.Warn("channel: cannot acknowledge a message's old record; it is delivered again after a restart", "id", m.ID.String(), "why", why, "err", err)
	}
	return err
}

// ack acknowledges the record m came from, if any, and then its delivery
// journal record: that one counts nothing once the record is gone.
func (c *Channel) ack(m *Message) error {
	if err := c.ackSource(m); err != nil || m.jrec == 0 {
		return err
	}
	c.journalAck(m.jrec - 1)
	return nil
}

func (c *Channel) ackSource(m *Message) error {
	switch m.src {
	case srcBackend:
		err := c.src.Ack(m.seq)
		if c.fan != nil && errors.Is(err, diskqueue.ErrNotInFlight) {
			// The channel acknowledges each record it delivered once, so
			// the topic's cursor finds one not in flight only when its
			// Empty or the lag policy discarded it while a consumer had
			// it in hand: done already, not an error to its Finish.
			return nil
		}
		return err
	case srcTimers:
		c.settleBefore()
		if err := c.timers.store.ack(m.seq); err != nil {
			return err
		}
		c.mu.Lock()
		c.timers.done(m.seq)
		c.mu.Unlock()
	}
	return nil
}
