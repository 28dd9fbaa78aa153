package histogram

import (
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	prev := time.Duration(0)
	for i := 0; i < latencyBuckets; i++ {
		up := bucketUpper(i)
		if up <= prev {
			t.Fatalf("bucket %d upper %v not above %v", i, up, prev)
		}
		prev = up
	}
	for _, d := range []time.Duration{0, time.Microsecond, 3 * time.Microsecond, 5 * time.Microsecond, 999 * time.Microsecond, time.Millisecond, 1234567 * time.Microsecond, time.Hour} {
		i := bucketOf(d)
		// Buckets are [previous upper, upper).
		if d >= bucketUpper(i) || (i > 0 && d < bucketUpper(i-1)) {
			t.Fatalf("%v in bucket %d: [%v, %v)", d, i, bucketUpper(i-1), bucketUpper(i))
		}
		if d >= 4*time.Microsecond && float64(bucketUpper(i)) > 1.26*float64(d) {
			t.Fatalf("%v: bucket bound %v is more than 26%% off", d, bucketUpper(i))
		}
	}
}

func TestPercentiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	p := h.Percentiles(0.5, 0.99, 1)
	within := func(got, want time.Duration) bool {
		return got >= want && float64(got) <= 1.26*float64(want)
	}
	if !within(p[0], 500*time.Millisecond) || !within(p[1], 990*time.Millisecond) || !within(p[2], 1000*time.Millisecond) {
		t.Fatalf("percentiles %v", p)
	}
}

func TestSnapshot(t *testing.T) {
	var h Histogram
	h.Record(3 * time.Millisecond)
	h.Record(3 * time.Millisecond)
	h.Record(time.Second)
	upper, counts := h.Snapshot()
	if len(upper) != 2 || counts[0] != 2 || counts[1] != 1 || upper[0] <= 3*time.Millisecond || upper[1] <= time.Second {
		t.Fatalf("snapshot %v %v", upper, counts)
	}
}

func TestSumSeconds(t *testing.T) {
	var h Histogram
	if h.SumSeconds() != 0 {
		t.Fatalf("empty histogram sums to %v", h.SumSeconds())
	}
	h.Record(1500 * time.Millisecond)
	h.Record(250 * time.Millisecond)
	h.Record(-time.Second) // counted as 0
	if got := h.SumSeconds(); got != 1.75 {
		t.Fatalf("sum %v s, want 1.75 s", got)
	}
	// Concurrent Records must not lose an addition.
	const goroutines, each = 4, 1000
	done := make(chan struct{})
	for range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for range each {
				h.Record(time.Second)
			}
		}()
	}
	for range goroutines {
		<-done
	}
	if got, want := h.SumSeconds(), 1.75+goroutines*each; got != want {
		t.Fatalf("sum %v s after concurrent records, want %v s", got, want)
	}
	// A sum far past what int64 nanoseconds hold (292 years) still adds up.
	var big Histogram
	for range 1000 {
		big.Record(100 * 365 * 24 * time.Hour)
	}
	if got, want := big.SumSeconds(), 1000*100*365*24*3600.0; got != want {
		t.Fatalf("sum %v s, want %v s", got, want)
	}
}

// BenchmarkRecord times Record from every core at once, as consumers
// finishing messages do; the shared sum is the part that contends.
func BenchmarkRecord(b *testing.B) {
	var h Histogram
	b.RunParallel(func(pb *testing.PB) {
		d := 300 * time.Microsecond
		for pb.Next() {
			h.Record(d)
		}
	})
}

// TestSnapshotOf: the snapshot of several histograms adds the counts of
// the buckets they share and keeps those only one holds, in order.
func TestSnapshotOf(t *testing.T) {
	var a, b Histogram
	a.Record(2 * time.Microsecond)
	a.Record(time.Millisecond)
	b.Record(2 * time.Microsecond)
	b.Record(time.Second)
	upper, counts := SnapshotOf(&a, &b)
	wantUpper := []time.Duration{bucketUpper(bucketOf(2 * time.Microsecond)), bucketUpper(bucketOf(time.Millisecond)), bucketUpper(bucketOf(time.Second))}
	wantCounts := []uint64{2, 1, 1}
	if !slices.Equal(upper, wantUpper) || !slices.Equal(counts, wantCounts) {
		t.Fatalf("SnapshotOf = %v %v, want %v %v", upper, counts, wantUpper, wantCounts)
	}
	if u, c := SnapshotOf(); u != nil || c != nil {
		t.Fatalf("SnapshotOf() = %v %v, want nothing", u, c)
	}
}
