package diskqueue_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

func TestRotationAndDeletion(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 1024})
	defer q.Close()
	putN(t, q, 0, 200)
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	if st.Segments < 5 {
		t.Fatalf("Segments: got %d, want several", st.Segments)
	}
	readN(t, q, 0, 200, true)
	// Deletion happens on the writer goroutine; Sync is a barrier through it.
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "0*.log")) // segments, not the spare
	if len(logs) != 1 {
		t.Fatalf("log files after consuming everything: got %d (%v), want 1", len(logs), logs)
	}
}

// TestHoldFrom: HoldFrom keeps the acknowledged segments holding records
// from its seq on, and moving it lets them go.
func TestHoldFrom(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{MaxSegmentBytes: 1 << 10})
	defer l.Close()
	c := openCursor(t, l, "a", diskqueue.FromOldest())
	l.HoldFrom(0)
	ctx := context.Background()
	for range 200 {
		putReadAck(t, ctx, l, c, make([]byte, 50))
	}
	if err := l.Sync(ctx); err != nil { // a writer round: housekeeping
		t.Fatal(err)
	}
	if st := l.Stats(); st.FirstSeq != 0 || st.Segments < 5 {
		t.Fatalf("held from 0: first seq %d, %d segments; want all kept", st.FirstSeq, st.Segments)
	}
	l.HoldFrom(150)
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().FirstSeq == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("hold moved to 150: still %+v", l.Stats())
		}
		l.Sync(ctx)
		time.Sleep(time.Millisecond)
	}
	if st := l.Stats(); st.FirstSeq > 150 {
		t.Fatalf("hold at 150: first seq %d; the segment holding 150 went", st.FirstSeq)
	}
}
