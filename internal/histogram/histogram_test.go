package histogram

import (
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
