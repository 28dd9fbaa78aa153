package channel

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/spillq/spillq/diskqueue"
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

// timerEntry is a deferred message whose record is in the timer store.
type timerEntry struct {
	due int64 // Unix ns
	seq uint64
}

// before orders entries by due time, then by seq: messages due at the same
// moment come in the order they were stored, as those a topic's channel
// keeps at Close (all due then, its memory buffer's in put order).
func (e timerEntry) before(o timerEntry) bool {
	return e.due < o.due || e.due == o.due && e.seq < o.seq
}

// noHorizon is a horizon with nothing beyond it: the store holds no
// record that is not in memory.
var noHorizon = timerEntry{due: math.MaxInt64, seq: math.MaxUint64}

// earlier is the earlier of a and b in before's order.
func earlier(a, b timerEntry) timerEntry {
	if b.before(a) {
		return b
	}
	return a
}

// compare is before as a comparison, for sorting.
func (e timerEntry) compare(o timerEntry) int {
	if c := cmp.Compare(e.due, o.due); c != 0 {
		return c
	}
	return cmp.Compare(e.seq, o.seq)
}

// timerSet is the channel's view of its timer store; Channel.mu guards it.
//
// The invariant: every record in the store that is not in heap and not out
// comes at or after horizon in before's order (noHorizon: there is none).
// So while the heap's earliest entry is before horizon, it is the earliest
// deferred message of all; once it is not (or the heap is empty), a refill
// reads the store through and takes the earliest max entries again. The
// horizon is an entry, not a due time, because entries due at the same
// time are common (a topic's channel stores all it held due at Close): as
// a due time, a heap whose earliest entry was due at the horizon's time
// looked as if the store might hold one before it: each refill found the
// heap's own entries again and started the next, reading the store in a
// loop until those were released (for a due time ahead, until then).
type timerSet struct {
	store *seqStore
	max   int
	// putMu is held shared from a Put to the store until its entry is
	// added, and exclusively by a refill's merge: a record the refill read
	// is then either in the heap already or not to be added again.
	putMu sync.RWMutex

	heap timerHeap // at most max entries, but for a refill's transient excess
	// horizon: see the invariant.
	horizon timerEntry
	// out holds the records released for delivery (ready, in flight) and
	// not yet acknowledged: a refill must not take them again.
	out map[uint64]struct{}

	// refilling is set while a refill reads the store. Meanwhile every new
	// entry goes to the heap; spillMin is the earliest entry dropped from
	// it (shrink), and acked the records acknowledged, which the refill
	// may have read before they were.
	refilling bool
	spillMin  timerEntry
	acked     map[uint64]struct{}
	// gen is bumped by Empty: a refill that began before reads what Empty
	// discarded.
	gen uint64

	refills, scanned int64 // for tests: refills run, records they read
}

func newTimerSet(store Store, max int) *timerSet {
	return &timerSet{store: newSeqStore(store), max: max, horizon: noHorizon, out: map[uint64]struct{}{}, spillMin: noHorizon}
}

// add takes a new entry (the caller holds Channel.mu).
func (t *timerSet) add(e timerEntry) {
	if !t.refilling && !e.before(t.horizon) {
		return // on the store only; a refill finds it
	}
	heap.Push(&t.heap, e)
	if len(t.heap) > t.max {
		t.shrink()
	}
}

// shrink halves a full heap: the later half stays on the store only. Halving
// rather than dropping one entry keeps the cost of sorting at O(log max) per
// add, amortised.
func (t *timerSet) shrink() {
	slices.SortFunc(t.heap, timerEntry.compare)
	keep := (t.max + 1) / 2
	cut := t.heap[keep]
	if t.refilling {
		t.spillMin = earlier(t.spillMin, cut)
	} else {
		t.horizon = earlier(t.horizon, cut)
	}
	clear(t.heap[keep:])
	t.heap = t.heap[:keep] // sorted, so still a heap
}

// needRefill reports whether a refill should start: the store may hold an
// entry due before the heap's earliest.
func (t *timerSet) needRefill() bool {
	return !t.refilling && t.horizon != noHorizon && (len(t.heap) == 0 || !t.heap[0].before(t.horizon))
}

// next is the earliest due time in the heap, or 0.
func (t *timerSet) next() int64 {
	if len(t.heap) == 0 {
		return 0
	}
	return t.heap[0].due
}

// popDue takes the entries due by now out of the heap, marking them out.
func (t *timerSet) popDue(now int64, dst []timerEntry) []timerEntry {
	for len(t.heap) > 0 && t.heap[0].due <= now {
		e := heap.Pop(&t.heap).(timerEntry)
		t.out[e.seq] = struct{}{}
		dst = append(dst, e)
	}
	return dst
}

// done forgets a released record that has been acknowledged.
func (t *timerSet) done(seq uint64) {
	delete(t.out, seq)
	if t.refilling {
		t.acked[seq] = struct{}{}
	}
}

// empty forgets everything (Empty).
func (t *timerSet) empty() {
	t.heap = nil
	t.horizon, t.spillMin = noHorizon, noHorizon
	clear(t.out)
	clear(t.acked)
	t.gen++
}

// merge ends a refill with the earliest entries it read (kept, at most max,
// none earlier than excludedMin left out); the caller holds Channel.mu.
func (t *timerSet) merge(gen uint64, kept []timerEntry, excludedMin timerEntry) {
	t.refilling = false
	horizon := t.spillMin
	t.spillMin = noHorizon
	if gen == t.gen {
		horizon = earlier(horizon, excludedMin)
		in := make(map[uint64]struct{}, len(t.heap))
		for _, e := range t.heap {
			in[e.seq] = struct{}{}
		}
		for _, e := range kept {
			_, dup := in[e.seq]
			_, out := t.out[e.seq]
			_, acked := t.acked[e.seq]
			if !dup && !out && !acked {
				t.heap = append(t.heap, e)
			}
		}
		if len(t.heap) > t.max {
			slices.SortFunc(t.heap, timerEntry.compare)
			horizon = earlier(horizon, t.heap[t.max])
			clear(t.heap[t.max:])
			t.heap = t.heap[:t.max]
		}
		heap.Init(&t.heap)
	}
	// After an Empty, what the refill read is gone; spillMin covers what
	// was dropped since.
	t.horizon = horizon
	t.acked = nil
}

// timerHeap is a min-heap of entries in before's order.
type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// latestHeap is a max-heap of entries in before's order: a refill's
// earliest max.
type latestHeap struct{ timerHeap }

func (h latestHeap) Less(i, j int) bool { return h.timerHeap[j].before(h.timerHeap[i]) }

// refillTimers reads the timer store through and keeps the earliest
// entries; it runs on its own goroutine, one at a time. Cost: every record
// not acknowledged is read once (O(deferred)), O(log max) work each.
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
		kept := latestHeap{make(timerHeap, 0, min(t.max, 1024))}
		excludedMin := noHorizon
		var scanned int64
		var failed error
		for rec, err := range t.store.records() {
			if c.isClosed.Load() {
				break
			}
			if err != nil {
				failed = err
				break
			}
			scanned++
			if _, ok := out[rec.Seq]; ok {
				continue
			}
			e := timerEntry{due: envelopeDue(rec.Body), seq: rec.Seq}
			switch {
			case len(kept.timerHeap) < t.max:
				heap.Push(&kept, e)
			case e.before(kept.timerHeap[0]):
				excludedMin = earlier(excludedMin, kept.timerHeap[0])
				kept.timerHeap[0] = e
				heap.Fix(&kept, 0)
			default:
				excludedMin = earlier(excludedMin, e)
			}
		}
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
		t.merge(gen, kept.timerHeap, excludedMin)
		t.refills++
		t.scanned += scanned
		c.releaseHeldLocked() // if nothing was held, or all is released already
		c.mu.Unlock()
		t.putMu.Unlock()
		c.wakeClock()
		return
	}
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

// moveSettleWait is how long a moved message's old record waits for others
// before one sync of the timer store lets the settler acknowledge them
// all. It bounds what a crash delivers twice: a message moved within it
// (and the timer store's fsync after) comes from both stores.
const moveSettleWait = 2 * time.Millisecond

// queueMove hands m, just stored in the timer store, to the settler, which
// acknowledges its old record once the timer store has made the new one
// durable (settleMoves says why), one sync for the moves of a few
// milliseconds: a sync each (Requeue waiting for it) made a retry a
// hundred times slower.
func (c *Channel) queueMove(m *Message) {
	q := &c.moves
	q.mu.Lock()
	if len(q.pending) == 0 {
		q.since = time.Now()
	}
	q.pending = append(q.pending, m)
	q.n.Store(int64(len(q.pending)))
	q.mu.Unlock()
	select {
	case q.bell <- struct{}{}:
	default:
	}
}

// takeMoves returns what waits to be settled.
func (c *Channel) takeMoves() []*Message {
	q := &c.moves
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	q.n.Store(0)
	return out
}

// settleBefore settles the moves waiting for the settler now, before the
// caller acknowledges a timer store record: a message moved there can be
// due, delivered and finished before the settler's next round, and its new
// record acknowledged while its old one was not would bring it back after a
// crash, finished. Rare (a delay shorter than moveSettleWait), it costs a
// Sync of the timer store then.
func (c *Channel) settleBefore() {
	if c.moves.n.Load() == 0 {
		return
	}
	c.settleMoves(c.closeCtx, c.timers.store.log, c.takeMoves(), "deferred to the timer store")
}

// settler is the goroutine that settles moves (queueMove): at most
// moveSettleWait after the first waiting, one sync of the timer store for
// all that wait. What waits when the channel closes is settled by Close
// (after the goroutines that queue moves are done).
func (c *Channel) settler() {
	defer c.wg.Done()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for {
		select {
		case <-c.moves.bell:
		case <-c.closeCh:
			return
		}
		c.moves.mu.Lock()
		since := c.moves.since
		c.moves.mu.Unlock()
		wait.Reset(time.Until(since.Add(moveSettleWait)))
		select {
		case <-wait.C:
		case <-c.closeCh:
			wait.Stop()
			return
		}
		c.settleMoves(c.closeCtx, c.timers.store.log, c.takeMoves(), "deferred to the timer store")
	}
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

// putTimer writes m, which carries its due time, to the timer store and
// tracks it. It returns the record's seq there.
func (c *Channel) putTimer(ctx context.Context, m *Message) (uint64, error) {
	t := c.timers
	buf := envelopes.Get().(*[]byte)
	*buf = appendEnvelope((*buf)[:0], m)
	t.putMu.RLock()
	defer t.putMu.RUnlock()
	seq, err := t.store.put(ctx, *buf)
	if cap(*buf) <= 64<<10 {
		envelopes.Put(buf)
	}
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
		c.addReadyLocked(m)
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
