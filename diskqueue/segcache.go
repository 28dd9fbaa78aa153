package diskqueue

import (
	"slices"
	"sync"
)

// maxOpenSealed is how many sealed segments the cache lets keep their
// read handles (two descriptors, and up to two mappings once read, each)
// while nobody holds them. Segments a reader or a Scan is in keep theirs
// beyond it, and so do those being written or sealed; the rest are opened
// again on use, at the cost of a few system calls, as at Open.
const maxOpenSealed = 64

// segCache is the set of sealed segments whose read handles may be open:
// those opened on use and those this process sealed. Past maxOpenSealed,
// adding one gives back the handles of others nobody holds, by the clock
// algorithm over segment.used, so that the descriptors and mappings a log
// holds do not grow with its segments. Its mu comes after the log's segMu
// in the lock order and before a segment's filesMu (evict takes that of
// each segment it looks at).
type segCache struct {
	// bound replaces maxOpenSealed when above zero (tests set it through
	// Options.openSealedForTesting). Set before the log is shared.
	bound int
	mu    sync.Mutex
	segs  []*segment // in the order they joined; hand is the clock's
	hand  int
}

// add puts seg, whose read handles are open, in the cache and, when that
// takes it past its bound, gives back the handles of others.
func (c *segCache) add(seg *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !seg.cached {
		seg.cached = true
		c.segs = append(c.segs, seg)
	}
	bound := maxOpenSealed
	if c.bound > 0 {
		bound = c.bound
	}
	// Two turns of the clock: the first may only clear reference bits.
	for steps := 2 * len(c.segs); len(c.segs) > bound && steps > 0; steps-- {
		if c.hand >= len(c.segs) {
			c.hand = 0
		}
		s := c.segs[c.hand]
		if s.used.Load() {
			s.used.Store(false)
			c.hand++
			continue
		}
		if !s.evict() {
			c.hand++
			continue
		}
		s.cached = false
		c.segs = slices.Delete(c.segs, c.hand, c.hand+1)
	}
}

// evict gives back the segment's own reference to its current generation
// if nobody else holds it, closing its files and unmapping them, and
// reports whether the segment can leave the cache: evicted, deleted, or
// with no handles. A segment being written or sealed, or one held, stays.
// One that holds no record stays open but leaves: opened again, its time
// index (with no entry) would be taken for damage and rebuilt.
func (s *segment) evict() bool {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	f := s.files.Load()
	switch {
	case s.closed || f == nil || s.endNow() == s.base:
		return true
	case !s.sealed.Load() || s.writing.Load():
		return false
	case !f.refs.CompareAndSwap(1, 0):
		return false // a reader, a Scan or a compaction is in it
	}
	// From zero nobody takes a reference (tryAcquire), and acquireFiles
	// waits on filesMu for the nil that has it open the files again.
	s.files.Store(nil)
	s.evicted = true
	s.gaveBack.size, s.gaveBack.compacted, s.gaveBack.indexed = f.size, f.compacted, f.index != nil
	f.free()
	return true
}
