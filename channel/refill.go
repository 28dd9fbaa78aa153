package channel

import (
	"container/heap"
	"maps"
	"time"
)

// A refill reads the timer store through for the earliest entries, when
// those in memory are used up (timerSet.needRefill) and once at New. It
// runs on a goroutine of its own, one at a time, not on the clock's: it
// reads every record not acknowledged (O(deferred), a long read for a
// store with many deferred messages), and meanwhile the clock goes on
// timing out, releasing and settling.

// refillTimers reads the timer store through and merges the earliest
// entries into the timer set; it runs on its own goroutine, one at a time.
func (c *Channel) refillTimers() {
	defer c.wg.Done()
	t := c.timers
	for {
		c.mu.Lock()
		gen := t.gen
		// Released records are not to be taken again (merge leaves them
		// out): kept among the earliest here, they took the places of
		// others, and with max or more released and not finished each
		// refill kept only those, found nothing new, and started the next
		// at once, reading the store again and again.
		out := maps.Clone(t.out)
		c.mu.Unlock()
		r, failed := t.read(out, c.isClosed.Load)
		if c.isClosed.Load() {
			return
		}
		if failed != nil {
			c.log.Warn("channel: reading the deferred messages in the timer store; trying again in a second", "err", failed)
			// Delivery before order: what a topic's channel held at its
			// last Close comes when a later read finds it.
			c.mu.Lock()
			gated := c.held.waiting.Load()
			c.openHeldLocked()
			c.mu.Unlock()
			if gated {
				c.log.Warn("channel: delivering from the log and the memory buffer without waiting for the messages held at the last Close")
			}
			select {
			case <-time.After(time.Second):
				continue
			case <-c.closeCh:
				return
			}
		}
		t.putMu.Lock()
		c.mu.Lock()
		t.merge(gen, r.kept.timerHeap, r.excludedMin)
		t.refills++
		t.scanned += r.scanned
		c.releaseHeldLocked() // if nothing was held, or all is released already
		c.mu.Unlock()
		t.putMu.Unlock()
		c.wakeClock()
		return
	}
}

// refillRead is what a refill's read found.
type refillRead struct {
	kept latestHeap // the earliest entries, at most max
	// excludedMin is the earliest entry read and not kept (noHorizon:
	// none): the horizon of what the store holds beyond kept.
	excludedMin timerEntry
	scanned     int64 // records read
}

// read reads the store through, leaving out the records in out (released),
// until it has read them all, a read fails, or stop says the channel
// closed. Cost: every record not acknowledged is read once, O(log max)
// work each. It takes no lock: the store's records are read as they are,
// and merge reconciles the set with what changed meanwhile.
func (t *timerSet) read(out map[uint64]struct{}, stop func() bool) (refillRead, error) {
	r := refillRead{kept: latestHeap{make(timerHeap, 0, min(t.max, 1024))}, excludedMin: noHorizon}
	for rec, err := range t.store.records() {
		if stop() {
			break
		}
		if err != nil {
			return r, err
		}
		r.scanned++
		if _, ok := out[rec.Seq]; ok {
			continue
		}
		e := timerEntry{due: envelopeDue(rec.Body), seq: rec.Seq}
		switch {
		case len(r.kept.timerHeap) < t.max:
			heap.Push(&r.kept, e)
		case e.before(r.kept.timerHeap[0]):
			r.excludedMin = earlier(r.excludedMin, r.kept.timerHeap[0])
			r.kept.timerHeap[0] = e
			heap.Fix(&r.kept, 0)
		default:
			r.excludedMin = earlier(r.excludedMin, e)
		}
	}
	return r, nil
}

// startRefillLocked starts a refill if one is needed; the caller holds
// Channel.mu.
func (c *Channel) startRefillLocked() {
	t := c.timers
	if t == nil || !t.needRefill() || c.isClosed.Load() {
		return
	}
	t.refilling = true
	t.acked = map[uint64]struct{}{}
	c.wg.Add(1)
	go c.refillTimers()
}

// latestHeap is a max-heap of entries in before's order: a refill's
// earliest max.
type latestHeap struct{ timerHeap }

func (h latestHeap) Less(i, j int) bool { return h.timerHeap[j].before(h.timerHeap[i]) }
