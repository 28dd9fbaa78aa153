package diskqueue

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestReadPassesOverASegmentLeavingTheLog: the reader took the first
// record of a segment (nextRaw) just as the writer marked the segment gone
// (every cursor had acknowledged all of it), and readAckFor, finding it
// gone, failed: Read returned ErrNotFound, and the record, given back,
// failed every Read after it until the next Open (TestPowerCutAtEverySync
// met it once in 26 runs). The writer's part is played here at the
// "read-taken" point, between the two, under the cursor's lock as in
// life: segment 3 marked gone, the cursor's bitmap of it not yet opened.
func TestReadPassesOverASegmentLeavingTheLog(t *testing.T) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	var q *Queue
	var fired bool
	opts := Options{MaxSegmentBytes: threePerSegment, crashPointForTesting: func(p string) {
		if p != "read-taken" || fired || q.c.rd.seg.base != 3 {
			return
		}
		fired = true
		c, seg := q.c, q.c.rd.seg
		seg.gone.Store(true)
		if sa := c.segs[seg]; sa != nil && sa.ack != nil {
			sa.ack.close()
			sa.ack = nil
		}
		c.lastRead = nil
	}}
	var err error
	if q, err = Open(t.TempDir(), opts); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	putFixed(t, q, 9) // segments 0, 3 and 6
	var got []uint64
	for {
		rec, err := q.Read(done)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatalf("Read after %v: %v", got, err)
		}
		got = append(got, rec.Seq)
	}
	if !fired {
		t.Fatal("the reader never took a record of segment 3")
	}
	if want := []uint64{0, 1, 2, 6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v: segment 3 left the log as its first record was taken", got, want)
	}
}
