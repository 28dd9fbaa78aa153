package channel

import "sync/atomic"

// heldGate holds a topic's channel's receivers to what its timer store
// held due at New until all of that is on the ready list: at a graceful
// Close such a channel stores everything it held (memory buffer, requeued,
// in flight) in its timer store, due at Close, and promises them first
// when it is opened again (FORMAT.md, "Topics"). The timer store is read in
// the background (refillTimers) while the pump reads the log ahead and the
// topic may hand the memory buffer new messages; without the gate a
// Receive right after the reopen took those whenever the read had not
// finished yet, which on a small store was about one restart in two.
//
// Until the gate opens, take takes from the ready list only, where the
// held messages go as they are read. It opens once no record due by New is
// left in the timer store unreleased (timerSet.dueBy), or when reading the
// store fails (order then gives way to delivery: the held messages come
// when a later read finds them), or at Empty. A channel of its own stores
// what it held in its backend, behind the backlog (the package doc's
// Ordering), and has no gate.
type heldGate struct {
	// waiting is set from New until the gate opens; the receive path
	// looks at it without a lock.
	waiting atomic.Bool
	// open is closed when the gate opens, under Channel.mu.
	open chan struct{}
	// before is New's time (Unix ns): records due by then are held.
	before int64
}

// initHeld shuts the gate, at New, for a topic's channel with a timer
// store.
func (c *Channel) initHeld() {
	c.held.open = make(chan struct{})
	c.held.before = c.started.UnixNano()
	c.held.waiting.Store(true)
}

// heldWait returns a chan that is closed when the gate opens, or nil once
// it is open (or there is none): take then takes from everywhere.
func (c *Channel) heldWait() <-chan struct{} {
	if !c.held.waiting.Load() {
		return nil
	}
	return c.held.open
}

// releaseHeldLocked opens the gate if every record due by New has been
// released; the caller holds Channel.mu and, having put released messages
// on the ready list, rings the ready list after.
func (c *Channel) releaseHeldLocked() {
	if c.held.waiting.Load() && !c.timers.dueBy(c.held.before) {
		c.openHeldLocked()
	}
}

// openHeldLocked opens the gate; the caller holds Channel.mu.
func (c *Channel) openHeldLocked() {
	if c.held.waiting.CompareAndSwap(true, false) {
		close(c.held.open)
	}
}

// dueBy reports whether a record due by at may be in the store and not
// released: in the heap, or (the invariant's horizon at or before at) on
// the store only, or not known yet because a refill is reading the store.
func (t *timerSet) dueBy(at int64) bool {
	return t.refilling || t.horizon.due <= at || len(t.heap) > 0 && t.heap[0].due <= at
}
