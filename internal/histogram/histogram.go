// Package histogram records durations in log-linear buckets, for the
// latency figures both channel and diskqueue report. It is shared code, not
// API: each package exports its own snapshot.
package histogram

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records durations in log-linear buckets: four per power
// of two, from 1 µs up, so any percentile is known to within 19%, and their
// sum (to the microsecond, the buckets' own resolution). Recording is two
// atomic adds; nothing is allocated.
type Histogram struct {
	buckets [latencyBuckets]atomic.Int64
	// sumMicros is the sum of the durations in microseconds: an atomic add
	// where a float sum would need a compare-and-swap loop on one word
	// every consumer contends for. Nanoseconds would wrap within hours on
	// a busy channel with a backlog (a million finishes a second, each a
	// second late, add 1e6 s a second); microseconds hold 584,000 years of
	// latency, 213 days even at that rate.
	sumMicros atomic.Uint64
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
	h.sumMicros.Add(uint64(d / time.Microsecond))
}

// SumSeconds returns the sum of every duration recorded, in seconds. Read
// after Snapshot, it may include a few durations recorded in between.
func (h *Histogram) SumSeconds() float64 {
	return float64(h.sumMicros.Load()) / 1e6
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
	return SnapshotOf(h)
}

// SnapshotOf is Snapshot of hs taken together, each bucket's counts added,
// for a figure recorded in several histograms so that its recorders do not
// share cache lines.
func SnapshotOf(hs ...*Histogram) (upper []time.Duration, counts []uint64) {
	for i := range latencyBuckets {
		var n int64
		for _, h := range hs {
			n += h.buckets[i].Load()
		}
		if n > 0 {
			upper = append(upper, bucketUpper(i))
			counts = append(counts, uint64(n))
		}
	}
	return upper, counts
}
