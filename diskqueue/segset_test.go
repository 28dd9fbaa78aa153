package diskqueue

import (
	"errors"
	"testing"
)

// segsFixture is a segment list without files: [0,10) [10,20) gone,
// [20,25) with its first two records freed in place, and [25,25) empty
// and being written.
func segsFixture() *segSet {
	mk := func(base, end uint64, size int64) *segment {
		s := &segment{base: base}
		s.setExtent(size, end)
		return s
	}
	s := &segSet{segs: []*segment{mk(0, 10, 1000), mk(10, 20, 900), mk(20, 25, 500), mk(25, 25, fileHeaderSize)}}
	s.segs[1].gone.Store(true)
	s.segs[2].keptFrom.Store(22)
	return s
}

func TestSegSetLookups(t *testing.T) {
	s := segsFixture()
	for _, c := range []struct {
		seq  uint64
		base int64 // -1: none
	}{{0, 0}, {9, 0}, {10, 10}, {19, 10}, {20, 20}, {24, 20}, {25, -1}, {100, -1}} {
		got := s.segmentAt(c.seq)
		if c.base < 0 && got != nil || c.base >= 0 && (got == nil || got.base != uint64(c.base)) {
			t.Errorf("segmentAt(%d) = %v, want base %d", c.seq, got, c.base)
		}
		seg, err := s.segmentFor(c.seq)
		if c.base < 0 {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("segmentFor(%d): %v, want ErrNotFound", c.seq, err)
			}
		} else if err != nil || seg.base != uint64(c.base) {
			t.Errorf("segmentFor(%d) = %v, %v", c.seq, seg, err)
		}
	}
	if got := s.segmentAfter(s.segs[1]); got != s.segs[2] {
		t.Errorf("segmentAfter(10) = %v", got)
	}
	if got := s.segmentAfter(s.segs[3]); got != nil {
		t.Errorf("segmentAfter(the last) = %v", got)
	}
	if _, err := (&segSet{}).segmentFor(0); !errors.Is(err, ErrClosed) {
		t.Errorf("segmentFor on no segments: %v, want ErrClosed", err)
	}
	// Below the first segment: not found, and said so.
	s.segs = s.segs[2:]
	if _, err := s.segmentFor(3); !errors.Is(err, ErrNotFound) {
		t.Errorf("segmentFor below the first: %v", err)
	}
	if got := s.firstSeq(); got != 22 {
		t.Errorf("firstSeq past a freed prefix = %d, want 22", got)
	}
	if got := (&segSet{}).firstSeq(); got != 0 {
		t.Errorf("firstSeq of no segments = %d", got)
	}
}

// Stats counts the segments on disk: a gone one is not, though it stays
// in the list; the first seq is that of the first segment on disk.
func TestSegSetSummary(t *testing.T) {
	s := segsFixture()
	s.segs[0].gone.Store(true)
	got := s.summary()
	want := segSummary{onDisk: 2, firstSeq: 22, writePos: Position{Segment: 25, Offset: fileHeaderSize}}
	if got != want {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if got := (&segSet{}).summary(); got != (segSummary{}) {
		t.Fatalf("summary of no segments %+v", got)
	}
}
