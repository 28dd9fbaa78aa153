package channel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Receive returns the next message, waiting until there is one, ctx ends
// or the channel closes. The message is in flight until Finish or Requeue;
// if neither comes within MsgTimeout, it is delivered again.
//
// Requeued and timed-out messages are delivered first, then the memory
// buffer, then the backend, which holds only messages newer than any in
// memory. On a topic's channel, what it held at its last Close comes
// before all of them: until its timer store has been read for those,
// Receive takes nothing else (see [Fanout.Join]). With a ctx that is
// already done, Receive takes nothing and returns ctx.Err(), so a worker
// loop stops taking work as soon as its ctx ends, backlog or not;
// [Channel.TryReceive] takes a message without waiting.
func (c *Channel) Receive(ctx context.Context) (*Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.receive(ctx)
}

// TryReceive returns a message that is ready now, without waiting: nil
// and [ErrNoMessage] when there is none (or the channel is paused).
func (c *Channel) TryReceive() (*Message, error) {
	if c.isClosed.Load() {
		// Else a paused channel's wait could report the done ctx first.
		return nil, ErrClosed
	}
	m, err := c.receive(doneCtx)
	if err == context.Canceled {
		return nil, ErrNoMessage
	}
	return m, err
}

// doneCtx is a context that is done: take, given it, looks at what is
// ready and does not wait.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (c *Channel) receive(ctx context.Context) (*Message, error) {
	for {
		if err := c.waitUnpaused(ctx); err != nil {
			return nil, err
		}
		m, err := c.receiveOne(ctx)
		if err == errPaused {
			continue
		}
		if err != nil || m != nil {
			return m, err
		}
	}
}

// receiveOne takes a message and puts it in flight, all within the take
// (enterTake). It returns nil and no error for one taken and not to be
// delivered (dropped, dead-lettered, parked behind its key), and errPaused
// when Pause came first or as it took one (which goes back, undelivered,
// ahead of everything).
func (c *Channel) receiveOne(ctx context.Context) (*Message, error) {
	if !c.enterTake() {
		return nil, ErrClosed
	}
	defer c.leaveTake()
	m, err := c.take(ctx)
	if err != nil {
		return nil, err
	}
	if c.isPaused() && c.giveBack(m) {
		return nil, errPaused
	}
	if m, ok := c.deliver(m); ok {
		return m, nil
	}
	return nil, nil
}

// enterTake counts a receiver in from take to deliver, where the message
// it took is in none of the lists Close collects, and Close waits for it
// (waitTakers) before collecting them: a message taken from the memory
// buffer as Close ran was put in flight after Close had collected the
// flights, neither stored nor counted lost, and a Requeue of it returned
// nil. It returns false once Close has begun. The count goes up before
// isClosed is looked at, and Close sets isClosed before it waits, so a
// receiver either sees Close begun or is waited for.
func (c *Channel) enterTake() bool {
	c.takers.n.Add(1)
	if c.isClosed.Load() {
		c.leaveTake()
		return false
	}
	return true
}

func (c *Channel) leaveTake() { c.takers.leave() }

// takers counts the receivers between take and deliver (enterTake).
type takers struct {
	n atomic.Int64
	// done is closed by the receiver that brings n back down to
	// takingClosed, once Close has added that.
	done chan struct{}
	once sync.Once
}

// takingClosed is what Close adds to the count of receivers in take: far
// above any number of goroutines, so the count is back to it exactly
// when every receiver let in has left (one refused after Close began
// leaves it there too, with none in).
const takingClosed = 1 << 40

func (t *takers) leave() {
	if t.n.Add(-1) == takingClosed {
		t.once.Do(func() { close(t.done) })
	}
}

// closeAndWait lets no receiver in any more (with isClosed set) and waits
// for those in take to leave.
func (t *takers) closeAndWait() {
	if t.n.Add(takingClosed) == takingClosed {
		return // none in take
	}
	<-t.done
}

// giveBack returns a message take handed out and nobody received to the
// front of the ready list, where the next take finds it first.
// It returns false, leaving m to the caller, once Close has begun: Close
// sets isClosed before it collects the ready list under c.mu, so a
// message given back after that would be in nobody's hands.
func (c *Channel) giveBack(m *Message) bool {
	c.mu.Lock()
	if c.isClosed.Load() {
		c.mu.Unlock()
		return false
	}
	c.ready.pushFrontLocked(m)
	c.mu.Unlock()
	c.ready.ring()
	return true
}

// errPaused is take's: Pause came while it waited, and it took nothing.
var errPaused = errors.New("channel: paused")

// take gets the next message from any source: the ready list, then the
// memory buffer, then the backend: the read-ahead, or a read of its own
// (readDirect; see pump.go for the delivery model).
//
// Receivers take from the ready list themselves rather than through a
// hand-off from the clock goroutine, so a message requeued by this
// goroutine a moment ago is already there for its next Receive; and they
// read the backend themselves, so a backlog drains without a hand-off
// from the pump.
func (c *Channel) take(ctx context.Context) (*Message, error) {
	for {
		if m := c.popReady(); m != nil {
			return m, nil
		}
		// Until a topic's channel has what it held at its last Close on
		// the ready list, nothing else (heldGate): nil chans below.
		held := c.heldWait()
		mem, bell := c.memCh, c.ahead.bell
		if held != nil {
			mem, bell = nil, nil
		}
		// Memory before disk (disk holds only newer messages), each looked
		// at without waiting: a done ctx still gets a message the pump has
		// ready, and a backlog costs no lock.
		select {
		case m := <-mem:
			return m, nil
		default:
		}
		if held == nil && bell != nil {
			if m, _ := c.ahead.pop(); m != nil {
				c.takenAhead(m)
				return m, nil
			}
			if m := c.readDirect(); m != nil {
				return m, nil
			}
		}
		wait := c.ready.wait()
		// Look again now that we are registered for the next ready
		// message, so one added between the two is not missed.
		if m := c.popReady(); m != nil {
			return m, nil
		}
		// A Receive waiting here when Pause comes returns to wait for
		// Unpause without taking a message, so waiting receivers do not
		// each take one and give them back in reverse order.
		paused, unpaused := c.pause.signals()
		if unpaused != nil {
			return nil, errPaused
		}
		if bell != nil {
			// Nothing to take, and the read above found nothing, or
			// another reader held the backend: the pump reads for the
			// waiters, waiting for records if need be.
			c.ahead.ask()
		}
		if c.takeWaitsForTesting != nil {
			c.takeWaitsForTesting()
		}
		select {
		case <-paused:
			return nil, errPaused
		case <-wait:
		case <-held: // open now: look everywhere
		case m := <-mem:
			return m, nil
		case <-bell:
			// The token is this receiver's to pass on: a message it
			// leaves behind must wake the next one waiting.
			//
			// Memory first, as above: select picks at random among the
			// cases ready, and a message that reached memory while this
			// receiver came to wait is older than the backend's. Taken
			// from the read-ahead, it went out after a newer one: a
			// spill drained out of put order (TestSpillAndDrain, under
			// -race -cpu 1).
			select {
			case m := <-c.memCh:
				if c.ahead.len() > 0 {
					c.ahead.ring()
				}
				return m, nil
			default:
			}
			m, more := c.ahead.pop()
			if more {
				c.ahead.ring()
			}
			if m != nil {
				c.takenAhead(m)
				return m, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closeCh:
			return nil, ErrClosed
		}
	}
}

// takenAhead counts a message taken from the pump's read-ahead off
// diskPending, unless it was read before an Empty, which counted it off
// already (deliver drops it): counted twice, a few stale ones brought
// diskPending to zero with newer records still in the backend, and Put
// sent the next messages to memory, ahead of them.
func (c *Channel) takenAhead(m *Message) {
	if m.gen == c.gen.Load() {
		c.delivered()
	}
}

// deliver puts a taken message in flight. It returns false for a message
// that must not reach a consumer: discarded by Empty, expired or out of
// attempts (dead-lettered here, within the take, so that Close waits for
// the handler and its acknowledgement of the record before it closes the
// stores).
func (c *Channel) deliver(m *Message) (*Message, bool) {
	if m.gen != c.gen.Load() {
		c.keyDone(m) // emptied: it holds its key no more
		return nil, false
	}
	if m.src == srcBackend && c.src.Discarded(m.seq) {
		c.keyDone(m)
		return nil, false
	}
	if m.expires != 0 && time.Now().UnixNano() > m.expires {
		c.cons.expired.Add(1)
		c.deadLetter(m, ErrExpired)
		return nil, false
	}
	if c.exhausted(m) {
		// Its deliveries used up before it came here: the delivery
		// journal counted deliveries a crash cut short (a job that kills
		// its process), or a dead-letter handler refused it and it came
		// round again. Delivered, it would go past MaxAttempts.
		c.deadLetter(m, ErrMaxAttempts)
		return nil, false
	}
	if m.Key != nil && c.fan != nil && c.fan.keys != nil && c.fan.keys.policy == KeyReplace && c.fan.keys.supersedes(m.Key, m.ID) {
		c.cons.superseded.Add(1)
		c.dropSuperseded(m)
		return nil, false
	}
	if c.keys != nil && m.Key != nil {
		switch ok, drop := c.keys.take(m); {
		case drop:
			c.dropSuperseded(m)
			return nil, false
		case !ok:
			return nil, false // parked behind its key's message (KeySerial)
		}
	}
	if c.jrn != nil {
		// Before it is in flight, where its answers look at m.jrec.
		c.journalDeliver(m)
	}
	f := c.flightFor(m)
	f.mu.Lock()
	m.Attempts++
	m.deadline = c.now.Load() + int64(c.opts.MsgTimeout)
	m.state = stateInFlight
	f.link(m)
	f.mu.Unlock()
	return m, true
}

// ReceiveBatch waits for one message like Receive, then takes up to max-1
// more that are ready without waiting.
func (c *Channel) ReceiveBatch(ctx context.Context, max int) ([]*Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: ReceiveBatch max %d", ErrInvalidOptions, max)
	}
	first, err := c.Receive(ctx)
	if err != nil {
		return nil, err
	}
	out := []*Message{first}
	for len(out) < max && !c.isPaused() {
		m, err := c.receiveOne(doneCtx)
		if err != nil {
			break
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// Messages returns a Go channel of messages, for use in select. Each
// message received from it is in flight, exactly as from Receive, its
// MsgTimeout running from when it was received. The Go channel is closed
// when the Channel closes. One message at a time waits to be received
// from it, taken from the Channel (in flight, its attempt counted) and
// kept from timing out until a consumer has it: Receive never returns that
// one, so a program that reads the Go channel only now and then (in a
// select with a timeout, say) and otherwise calls Receive leaves it
// waiting until it reads the Go channel again or closes the Channel (which
// stores it for the next run). Use one of the two.
func (c *Channel) Messages() <-chan *Message {
	c.messagesOnce.Do(func() {
		c.messagesCh = make(chan *Message)
		// Under putMu, as a Put: Close sets isClosed, then takes putMu
		// before it waits for wg, so the Add is either seen by that Wait
		// or sees isClosed (an Add racing a Wait from zero is not
		// allowed).
		c.prod.putMu.RLock()
		defer c.prod.putMu.RUnlock()
		if c.isClosed.Load() {
			close(c.messagesCh)
			return
		}
		c.wg.Add(1)
		go c.forward()
	})
	return c.messagesCh
}

// forward feeds Messages. The message it holds until a consumer takes it
// is in flight: without the Touches its timeout ran out while nobody read
// the Go channel, and it came again with an attempt counted (dead-lettered
// unseen with MaxAttempts 1).
func (c *Channel) forward() {
	defer c.wg.Done()
	defer close(c.messagesCh)
	// Touching more often than every millisecond would spin for a
	// degenerate MsgTimeout, which times messages out before anyone can
	// take them anyway.
	every := max(c.opts.MsgTimeout/2, time.Millisecond)
	hold := time.NewTicker(every)
	defer hold.Stop()
	for {
		m, err := c.Receive(c.closeCtx)
		if err != nil {
			return
		}
		hold.Reset(every)
		for handed := false; !handed; {
			// Paused after this goroutine took m, it holds m back until
			// Unpause: a nil send case is never chosen.
			send := c.messagesCh
			paused, unpaused := c.pause.signals()
			if unpaused != nil {
				send = nil
			}
			select {
			case send <- m:
				// The consumer's whole timeout from now on. It may have
				// finished the message already: then there is nothing to
				// touch.
				_ = m.Touch()
				handed = true
			case <-paused:
			case <-unpaused:
			case <-hold.C:
				if m.Touch() != nil {
					// Timed out all the same (a stall longer than half
					// the timeout): it is delivered again, or was
					// dead-lettered, and this copy is no longer in flight.
					handed = true
				}
			case <-c.closeCh:
				// m stays in flight; Close writes it to the backend.
				return
			}
		}
	}
}
