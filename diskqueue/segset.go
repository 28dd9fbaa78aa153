package diskqueue

import (
	"fmt"
	"sort"
	"sync"
)

// segSet is the log's list of segments, in order of base: every segment
// from the oldest retained to the one being written, those deleted as
// acknowledged behind an older one included (gone), so that the gap they
// leave is not taken for lost data. Rotation (under the log's mu) appends
// to it; the writer goroutine removes from it. Readers take a snapshot
// (the slice header, under segMu) and search it without the lock: the
// list is replaced, never changed in place below its length.
//
// It is embedded in Log, so the log's code says l.segs and l.segMu.
type segSet struct {
	segMu sync.RWMutex
	segs  []*segment // sorted by base; the last one is being written
}

// snapshot returns the list as it is now.
func (s *segSet) snapshot() []*segment {
	s.segMu.RLock()
	segs := s.segs
	s.segMu.RUnlock()
	return segs
}

// searchSegs returns the index of the last segment of segs whose base is
// at or below seq: the one whose range holds seq, if any does. -1 when
// seq is below the first base.
func searchSegs(segs []*segment, seq uint64) int {
	return sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
}

// segmentAt returns the segment (gone or not) whose range holds seq, or nil.
func (s *segSet) segmentAt(seq uint64) *segment {
	segs := s.snapshot()
	i := searchSegs(segs, seq)
	if i < 0 || seq >= segs[i].endNow() {
		return nil
	}
	return segs[i]
}

// segmentAfter returns the segment following seg, or nil.
func (s *segSet) segmentAfter(seg *segment) *segment {
	segs := s.snapshot()
	if i := searchSegs(segs, seg.base) + 1; i < len(segs) {
		return segs[i]
	}
	return nil
}

// segmentFor returns the segment holding seq, or ErrNotFound.
func (s *segSet) segmentFor(seq uint64) (*segment, error) {
	segs := s.snapshot()
	i := searchSegs(segs, seq)
	if i < 0 {
		if len(segs) == 0 {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: seq %d is older than the first retained record %d", ErrNotFound, seq, segs[0].base)
	}
	if seq >= segs[i].endNow() {
		return nil, fmt.Errorf("%w: seq %d has not been written", ErrNotFound, seq)
	}
	return segs[i], nil
}

// firstSeq is the oldest seq whose record may still be on disk: the first
// segment's base, or past the prefix freed in place (punch.go).
func (s *segSet) firstSeq() uint64 {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	if len(s.segs) == 0 {
		return 0
	}
	return max(s.segs[0].base, s.segs[0].keptFrom.Load())
}

// segSummary is what Stats reports of the segment list.
type segSummary struct {
	onDisk   int      // segments not gone
	firstSeq uint64   // the oldest record of the first segment on disk
	writePos Position // the end of the last segment
}

// summary returns the list's figures for Stats.
func (s *segSet) summary() segSummary {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	var sum segSummary
	for _, seg := range s.segs {
		if seg.gone.Load() {
			continue
		}
		if sum.onDisk == 0 {
			sum.firstSeq = max(seg.base, seg.keptFrom.Load())
		}
		sum.onDisk++
	}
	if len(s.segs) > 0 {
		last := s.segs[len(s.segs)-1]
		sum.writePos = Position{Segment: last.base, Offset: last.sizeNow()}
	}
	return sum
}
