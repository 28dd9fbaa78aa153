package diskqueue

import (
	"bytes"
	"context"
	"testing"
)

// TestTimeIndexAcrossManyReopens: every Close seals the active segment's
// time index with one more entry and the next Open appends to it again;
// the segment must roll before its mapped time index is full, not fail.
func TestTimeIndexAcrossManyReopens(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 64 << 10, MaxRecordBytes: 1000}
	ctx := context.Background()
	n := 0
	for cycle := 0; cycle < 40; cycle++ {
		q := mustOpen(t, dir, opts)
		for i := 0; i < 10; i++ {
			if err := q.Put(ctx, faultBody(n)); err != nil {
				t.Fatalf("cycle %d Put %d: %v", cycle, n, err)
			}
			n++
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	q := mustOpen(t, dir, opts)
	defer q.Close()
	for i := 0; i < 3000; i++ {
		if err := q.Put(ctx, bytes.Repeat([]byte("t"), 900)); err != nil {
			t.Fatalf("Put %d after 40 reopens: %v", i, err)
		}
	}
}
