package diskqueue

import (
	"context"
	"testing"
)

// TestSyncLatencyCounted: every fsync round a Sync waits for is counted
// in SyncLatencyBuckets, and its time in SyncLatencySumSeconds (a
// histogram's count and _sum, which metrics exports).
func TestSyncLatencyCounted(t *testing.T) {
	l, err := OpenLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const rounds = 5
	for i := range rounds {
		if err := l.Put(context.Background(), fixedBody(i)); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	upper, counts := l.SyncLatencyBuckets()
	var n uint64
	for i, c := range counts {
		n += c
		if i > 0 && upper[i] <= upper[i-1] {
			t.Fatalf("bucket bounds not increasing: %v", upper)
		}
	}
	if n < rounds {
		t.Fatalf("%d fsyncs counted after %d Syncs of new records", n, rounds)
	}
	if s := l.SyncLatencySumSeconds(); s <= 0 {
		t.Fatalf("SyncLatencySumSeconds %v after %d fsyncs", s, n)
	}
}
