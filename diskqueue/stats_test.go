package diskqueue

import (
	"context"
	"slices"
	"testing"
)

// TestStatsFollowsTheCursorFurthestBehind: a Log's Stats reports the
// cursor fields of the cursor retention waits on, the one furthest
// behind, whichever was opened first; with no cursor, ReadSeq is
// WriteSeq and ReadPos WritePos.
func TestStatsFollowsTheCursorFurthestBehind(t *testing.T) {
	l, err := OpenLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 10 {
		if err := l.Put(context.Background(), fixedBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.ReadSeq != 10 || st.WriteSeq != 10 || st.ReadPos != st.WritePos || st.Depth != 0 {
		t.Fatalf("no cursor: ReadSeq %d, WriteSeq %d, ReadPos %+v, WritePos %+v, Depth %d; want 10, 10, ReadPos = WritePos, 0",
			st.ReadSeq, st.WriteSeq, st.ReadPos, st.WritePos, st.Depth)
	}
	for _, c := range []struct {
		name string
		acks int
	}{{"ahead", 6}, {"behind", 2}, {"between", 4}} {
		cur, err := l.Cursor(c.name, FromOldest())
		if err != nil {
			t.Fatal(err)
		}
		readAcking(t, cur, c.acks, nil)
	}
	if st := l.Stats(); st.ReadSeq != 2 || st.Depth != 8 || st.Acks != 2 {
		t.Fatalf("Stats: ReadSeq %d, Depth %d, Acks %d; want the cursor furthest behind's: 2, 8, 2", st.ReadSeq, st.Depth, st.Acks)
	}
}

// TestSegmentsLeavesOutTombstones: Segments lists the segments on disk,
// oldest first, each with its seqs, its bytes and whether Compact would
// take it; segments deleted as acknowledged behind an older one
// (tombstones) are left out.
func TestSegmentsLeavesOutTombstones(t *testing.T) {
	opts := Options{MaxSegmentBytes: threePerSegment, FS: memFSKinds()[0].new(t)}
	tombstoneFixture(t, "/q", opts)
	q, err := Open("/q", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	putFixed(t, q, 1)                                    // seq 12, in a new active segment
	if err := q.Sync(context.Background()); err != nil { // seals segment 9, acknowledged whole: a tombstone
		t.Fatal(err)
	}
	var bases []uint64
	segs := q.Segments()
	for _, s := range segs {
		bases = append(bases, s.Base)
		if s.End <= s.Base || s.Bytes <= fileHeaderSize {
			t.Errorf("segment %d: seqs [%d, %d), %d bytes", s.Base, s.Base, s.End, s.Bytes)
		}
	}
	if !slices.Equal(bases, []uint64{0, 12}) {
		t.Fatalf("Segments: bases %v, want [0 12] (3 and 6 are tombstones since Open, 9 since its seal)", bases)
	}
	if !segs[0].Sealed || segs[1].Sealed {
		t.Fatalf("Segments: sealed %v %v, want the first only", segs[0].Sealed, segs[1].Sealed)
	}
	if segs[0].End != 3 || segs[1].End != 13 {
		t.Fatalf("Segments: ends %d and %d, want 3 and 13", segs[0].End, segs[1].End)
	}
}
