package diskqueue

import (
	"context"
	"testing"
)

// TestCaughtUpAcksListTheSegmentOnce: a consumer that keeps up with the
// writer brings the floor to the end of the segment being written at
// every Ack; the segment waits to be retired once, not once per Ack (the
// list grew by one each time, and every writer round went through it all,
// until the segment was sealed).
func TestCaughtUpAcksListTheSegmentOnce(t *testing.T) {
	q, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	for range 2000 {
		if err := q.Put(ctx, []byte("0123456789ab")); err != nil {
			t.Fatal(err)
		}
		rec, err := q.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	q.c.readMu.Lock()
	n := len(q.c.passed)
	q.c.readMu.Unlock()
	if n > 1 {
		t.Fatalf("%d bitmaps wait to be retired, want at most the one segment's", n)
	}
}
