package diskqueue_test

import (
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

func TestReopenKeepsUnacked(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 2048})
	putN(t, q, 0, 300)
	readN(t, q, 0, 100, true)
	readN(t, q, 100, 50, false) // in flight, never acknowledged
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 2048})
	defer q.Close()
	if got := q.Depth(); got != 200 {
		t.Fatalf("Depth after reopen: got %d, want 200", got)
	}
	readN(t, q, 100, 200, true)
	putN(t, q, 300, 10)
	recs := readN(t, q, 300, 10, true)
	if recs[0].Seq != 300 {
		t.Fatalf("seq after reopen: got %d, want 300", recs[0].Seq)
	}
}
