package channel

import (
	"sync"
	"sync/atomic"
)

// diskDeferred counts the deferred messages stored in the backend that the
// pump has not read back yet, for Stats: each is also in diskPending, but
// is not waiting for delivery.
//
// Those put since New are counted by putBackend. Those already in the
// backend at New (a restart) are found by a background read of the
// backlog, when the backend is a BacklogScanner, racing the pump, which
// reads the same records from the front: a record is counted by the scan
// only if the pump has not passed it, and uncounted by the pump only if it
// was counted. Both decisions are taken under mu, which is what makes them
// agree.
type diskDeferred struct {
	n atomic.Int64

	// pumpNext is the seq after the last record the pump read. Written by
	// the pump: under mu for a deferred record, atomically for any other
	// (no scan decision depends on a record that is not deferred).
	pumpNext atomic.Uint64

	// mu guards the fields below.
	mu sync.Mutex
	// end is the seq of the first record put after the scan began;
	// records from end on are counted by putBackend. 0 without a scan.
	end uint64
	// scanned is the seq after the last deferred record the scan counted
	// or passed over.
	scanned uint64
	// stopped is set by Empty: what the scan has not reached is gone.
	stopped bool
}

// put counts a deferred message on its way to the backend; unput takes a
// failed one back.
func (d *diskDeferred) put()   { d.n.Add(1) }
func (d *diskDeferred) unput() { decrementToZero(&d.n) }

// read tells of a record the pump has read; deferred says it carries a due
// time.
func (d *diskDeferred) read(seq uint64, deferred bool) {
	if !deferred {
		d.pumpNext.Store(seq + 1)
		return
	}
	d.mu.Lock()
	d.pumpNext.Store(seq + 1)
	if seq >= d.end || seq < d.scanned {
		decrementToZero(&d.n)
	}
	d.mu.Unlock()
}

// removed tells of a deferred record a compaction removed before the pump
// read it: counted off as read would, but the pump has not passed it.
func (d *diskDeferred) removed(seq uint64) {
	d.mu.Lock()
	if seq >= d.end || seq < d.scanned {
		decrementToZero(&d.n)
	}
	d.mu.Unlock()
}

// found tells of a deferred record the scan has read, and reports whether
// the scan should go on.
func (d *diskDeferred) found(seq uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return false
	}
	if seq >= d.pumpNext.Load() {
		d.n.Add(1)
	}
	d.scanned = seq + 1
	return true
}

// empty forgets every deferred record in the backend, and stops the scan.
func (d *diskDeferred) empty() {
	d.mu.Lock()
	d.stopped = true
	d.n.Store(0)
	d.mu.Unlock()
}

// decrementToZero lowers n by one, never below zero: an Empty racing a
// Put can leave a record a count no longer includes.
func decrementToZero(n *atomic.Int64) {
	for {
		v := n.Load()
		if v <= 0 || n.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// scanBacklog counts the deferred messages among the records the backend
// held at New; it runs on its own goroutine.
func (c *Channel) scanBacklog(records func(yield func(seq uint64, body []byte, err error) bool)) {
	defer c.wg.Done()
	records(func(seq uint64, body []byte, err error) bool {
		if c.isClosed.Load() {
			return false
		}
		if err != nil {
			// The pump meets the same record and deals with it; the count
			// may be short by what this one held.
			c.log.Warn("channel: counting deferred messages in the backend: skipped a record", "seq", seq, "err", err)
			return true
		}
		if !envelopeHasDue(body) {
			return true
		}
		return c.diskDeferred.found(seq)
	})
}
