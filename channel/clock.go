package channel

import (
	"container/heap"
	"math"
	"time"
)

// unixNano is t in Unix nanoseconds, saturated: a time past what an int64
// of them reaches (after the year 2262, as a "never" of 9999-12-31 is) is
// the latest, one before 1678 the earliest. t.UnixNano is undefined there
// and wrapped round: an Expires of 9999 had the message expire at once,
// and a Delay of 240 years delivered it at once.
func unixNano(t time.Time) int64 {
	switch {
	case t.After(latestUnixNano):
		return math.MaxInt64
	case t.Before(earliestUnixNano):
		return math.MinInt64
	}
	return t.UnixNano()
}

var latestUnixNano, earliestUnixNano = time.Unix(0, math.MaxInt64), time.Unix(0, math.MinInt64)

// clock owns time: it times out in-flight messages, releases deferred
// messages when due, onto the ready list receivers take from, and settles
// the moves to the timer store (settleDue) when they have waited
// moveSettleWait.
func (c *Channel) clock() {
	defer c.wg.Done()
	// Timeouts are found by a periodic scan, as nsqd's queueScanLoop does,
	// so the receive path never has to wake this goroutine.
	scan := min(max(c.opts.MsgTimeout/20, time.Millisecond), time.Second)
	ticker := time.NewTicker(scan)
	defer ticker.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
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
		// A nil chan while no move waits: its timer may have fired for
		// moves settleBefore took since.
		var settled <-chan time.Time
		if at, ok := c.moves.due(); ok {
			settle.Reset(time.Until(at))
			settled = settle.C
		}
		select {
		case <-ticker.C:
			storeMax(&c.now, c.monotonic())
			c.expireInFlight()
		case <-due.C:
			c.releaseDue()
		case <-settled:
			c.settleDue()
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
			c.ready.addLocked(m.redelivery())
			readied = true
		}
		c.mu.Unlock()
		f.mu.Unlock()
	}
	if readied {
		c.ready.ring()
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
		c.ready.addLocked(m)
		readied = true
	}
	c.mu.Unlock()
	if c.timers != nil && c.releaseTimers(now) {
		readied = true
	}
	if readied {
		c.ready.ring()
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

// wakeClock has the clock goroutine look at its due times again: one
// changed (the deferred heap, the timer set, the moves to settle).
func (c *Channel) wakeClock() {
	select {
	case c.clockWake <- struct{}{}:
	default:
	}
}

// monotonic is the time now on the channel's clock: Unix ns at New plus
// the monotonic time since, immune to the wall clock stepping.
func (c *Channel) monotonic() int64 {
	return c.started.UnixNano() + int64(time.Since(c.started))
}
