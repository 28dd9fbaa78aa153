package channel

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"sync"
)

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

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool { return h[i].before(h[j]) }

func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *timerHeap) Push(x any) { *h = append(*h, x.(timerEntry)) }

func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
