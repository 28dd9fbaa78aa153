// Package histogram records durations in log-linear buckets, for the
// latency figures both channel and diskqueue report. It is shared code, not
// API: each package exports its own snapshot.
package histogram

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records durations in log-linear buckets: four per power
// of two, from 1 µs up, so any percentile is known to within 19%, and their
// exact sum. Recording is an atomic add and a compare-and-swap; nothing is
// allocated.
type Histogram struct {
	buckets [latencyBuckets]atomic.Int64
	// sumBits is the float64 sum of the durations in seconds. An int64 of
	// nanoseconds would wrap within hours on a busy channel with a backlog
	// (a million finishes a second, each a second late, add 1e6 s a
	// second: 292 years of nanoseconds in two and a half hours).
	sumBits atomic.Uint64
}

const (
	latencySub     = 4  // buckets per power of two
	latencyPowers  = 42 // 1 µs << 42 is about 50 days
	latencyBuckets = latencyPowers * latencySub
)

func bucketOf(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	if us < latencySub {
		return int(us)
	}
	p := bits.Len64(us) - 1 // us is in [2^p, 2^(p+1))
	sub := int(us>>(p-2)) & (latencySub - 1)
	i := (p-1)*latencySub + sub
	if i >= latencyBuckets {
		return latencyBuckets - 1
	}
	return i
}

// bucketUpper is the exclusive upper bound of bucket i.
func bucketUpper(i int) time.Duration {
	if i < latencySub {
		return time.Duration(i+1) * time.Microsecond
	}
	p := i/latencySub + 1
	sub := i % latencySub
	us := (uint64(latencySub+sub+1) << (p - 2))
	return time.Duration(us) * time.Microsecond
}

// Record counts d; a negative d counts as 0.
func (h *Histogram) Record(d time.Duration) {
	d = max(d, 0)
	h.buckets[bucketOf(d)].Add(1)
	for {
		old := h.sumBits.Load()
		sum := math.Float64frombits(old) + d.Seconds()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(sum)) {
			return
		}
	}
}

// SumSeconds returns the sum of every duration recorded, in seconds. Read
// after Snapshot, it may include a few durations recorded in between.
func (h *Histogram) SumSeconds() float64 {
	return math.Float64frombits(h.sumBits.Load())
}

// Percentiles returns the upper bounds of the buckets holding each
// quantile (0 < q <= 1), in the order asked.
func (h *Histogram) Percentiles(qs ...float64) []time.Duration {
	var counts [latencyBuckets]int64
	var total int64
	for i := range counts {
		counts[i] = h.buckets[i].Load()
		total += counts[i]
	}
	out := make([]time.Duration, len(qs))
	if total == 0 {
		return out
	}
	for k, q := range qs {
		rank := int64(q*float64(total) + 0.5)
		rank = max(1, min(rank, total))
		var seen int64
		for i, c := range counts {
			seen += c
			if seen >= rank {
				out[k] = bucketUpper(i)
				break
			}
		}
	}
	return out
}

// Snapshot returns the exclusive upper bound of every bucket that holds
// anything, with the number of durations in it, in increasing order.
func (h *Histogram) Snapshot() (upper []time.Duration, counts []uint64) {
	for i := range h.buckets {
		if n := h.buckets[i].Load(); n > 0 {
			upper = append(upper, bucketUpper(i))
			counts = append(counts, uint64(n))
		}
	}
	return upper, counts
}
