package channel

import (
	"container/heap"
	"errors"
	"time"
)

// pump moves records from the backend to consumers through diskCh. Records
// it holds or has buffered are not acknowledged: if the channel closes
// first, they simply stay in the backend.
func (c *Channel) pump() {
	defer c.wg.Done()
	for {
		seq, body, err := c.src.Read(c.closeCtx)
		if err != nil {
			if c.isClosed.Load() || errors.Is(err, ErrClosed) {
				return
			}
			c.log.Warn("channel: backend read failed; retrying", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-c.closeCh:
				return
			}
		}
		ok := c.dispatch(seq, body)
		if c.fan != nil {
			// After m is in diskCh: Channel.backlogged counts it there or
			// unread, never in neither.
			storeMax(&c.readThrough, seq+1)
		}
		if !ok {
			return
		}
	}
}

// dispatch passes on a record the pump read: to diskCh, to the deferred
// messages, or (not a message) acknowledged and dropped. It returns false
// when the channel closed first.
func (c *Channel) dispatch(seq uint64, body []byte) bool {
	// By the same test as the scan's, so a record it counted is uncounted
	// here even if it turns out not to decode.
	c.diskDeferred.read(seq, envelopeHasDue(body))
	gen := c.gen.Load()
	m, err := decodeEnvelope(body)
	if err != nil {
		c.cons.badRecords.Add(1)
		c.delivered()
		c.log.Warn("channel: dropping a backend record that is not a message", "seq", seq, "err", err)
		c.src.Ack(seq)
		return true
	}
	m.ch, m.seq, m.src, m.gen = c, seq, srcBackend, gen
	if m.due != 0 && m.due > time.Now().UnixNano() {
		c.delivered()
		if c.timers != nil {
			// Moved to the timer store (a queue written before it had
			// one, where it failed, or a topic's deferred message): a new
			// record there, then this one acknowledged.
			c.deferToTimers(c.closeCtx, m, m.due)
			return true
		}
		// Deferred: its record stays in the backend until it is
		// finished, so the due time survives a crash too.
		c.deferInMemory(m)
		return true
	}
	m.due = 0
	// The receiver lowers diskPending as it takes m (see take), so Depth
	// is exact the moment Receive returns.
	select {
	case c.diskCh <- m:
		return true
	case <-c.closeCh:
		c.unsent = m // see Close
		return false
	}
}

// clock owns time: it times out in-flight messages and releases deferred
// messages when due, onto the ready list receivers take from.
func (c *Channel) clock() {
	defer c.wg.Done()
	// Timeouts are found by a periodic scan, as nsqd's queueScanLoop does,
	// so the receive path never has to wake this goroutine.
	scan := min(max(c.opts.MsgTimeout/20, time.Millisecond), time.Second)
	ticker := time.NewTicker(scan)
	defer ticker.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		c.mu.Lock()
		next := int64(0)
		if len(c.deferred) > 0 {
			next = c.deferred[0].due
		}
		if c.timers != nil {
			if t := c.timers.next(); t != 0 && (next == 0 || t < next) {
				next = t
			}
			c.startRefillLocked()
		}
		c.mu.Unlock()
		if next != 0 {
			due.Reset(time.Until(time.Unix(0, next)))
		}
		select {
		case <-ticker.C:
			storeMax(&c.now, c.monotonic())
			c.expireInFlight()
		case <-due.C:
			c.releaseDue()
		case <-c.clockWake:
		case <-c.closeCh:
			return
		}
	}
}

// expireInFlight moves messages past their deadline to the ready list, or
// to the dead-letter handler when they are out of attempts.
func (c *Channel) expireInFlight() {
	now := c.monotonic()
	var dead []*Message
	readied := false
	for i := range c.flights {
		f := &c.flights[i]
		f.mu.Lock()
		if f.head == nil || f.head.deadline > now {
			f.mu.Unlock()
			continue
		}
		// Still holding the shard while they go to the ready list: see
		// flightList.
		c.mu.Lock()
		for m := f.head; m != nil && m.deadline <= now; m = f.head {
			f.land(m)
			c.cons.timeouts.Add(1)
			if c.exhausted(m) {
				dead = append(dead, m)
				continue
			}
			c.addReadyLocked(m.redelivery())
			readied = true
		}
		c.mu.Unlock()
		f.mu.Unlock()
	}
	if readied {
		c.readyBell.Notify()
	}
	for _, m := range dead {
		c.deadLetter(m, ErrMaxAttempts)
	}
}

// releaseDue moves deferred messages whose time has come to the ready list.
func (c *Channel) releaseDue() {
	now := time.Now().UnixNano()
	readied := false
	c.mu.Lock()
	for len(c.deferred) > 0 && c.deferred[0].due <= now {
		m := c.deferred.pop()
		m.due = 0
		c.addReadyLocked(m)
		readied = true
	}
	c.mu.Unlock()
	if c.timers != nil && c.releaseTimers(now) {
		readied = true
	}
	if readied {
		c.readyBell.Notify()
	}
}

// deferHeap orders deferred messages by due time.
type deferHeap []*Message

func (h deferHeap) Len() int           { return len(h) }
func (h deferHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h deferHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deferHeap) Push(x any)        { *h = append(*h, x.(*Message)) }
func (h *deferHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}
func (h *deferHeap) push(m *Message) { heap.Push(h, m) }
func (h *deferHeap) pop() *Message   { return heap.Pop(h).(*Message) }
