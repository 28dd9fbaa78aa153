package diskqueue_test

import (
	"os"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestTornSegmentCreation: a crash while a new segment's header was being
// written leaves a short file; Open removes it and carries on.
func TestTornSegmentCreation(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, 10, diskqueue.Options{})
	os.WriteFile(segFile(dir, 10, "log"), []byte("SQLG\x01"), 0o644)
	q := openQueue(t, dir, diskqueue.Options{})
	defer q.Close()
	checkServed(t, drain(t, q))
	putN(t, q, 10, 1)
	recs := drain(t, q)
	if len(recs) != 1 || recs[0].Seq != 10 {
		t.Fatalf("got %v", recs)
	}
}
