package diskqueue_test

import (
	"context"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// A cursor closes its bitmap of a segment once its read position has
// passed it, so a long retained log does not hold a descriptor per segment.
func TestPassedBitmapsAreClosed(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 1024, RetainBytes: 1 << 30})
	defer q.Close()
	putN(t, q, 0, 2000) // about 100 segments, all retained
	readN(t, q, 0, 2000, true)
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	if st.Segments < 50 {
		t.Fatalf("only %d segments retained", st.Segments)
	}
	if n := openAckFiles(t, dir); n > 3 {
		t.Fatalf("%d acknowledgement files open across %d fully acknowledged retained segments, want at most 3", n, st.Segments)
	}
	// Nothing acknowledged comes back after a reopen.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 1024, RetainBytes: 1 << 30})
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rec, err := q.Read(ctx); err == nil {
		t.Fatalf("after reopen Read returned seq %d, acknowledged before", rec.Seq)
	}
}
