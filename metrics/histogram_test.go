package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillq/spillq/internal/histogram"
)

// TestHistogramFoldIsExact records durations around every exported bound
// into spillq's histogram, folds its snapshot into the exported layout, and
// checks each cumulative count against the durations below that bound: the
// claim that every spillq bucket lies wholly under one bound.
func TestHistogramFoldIsExact(t *testing.T) {
	var h histogram.Histogram
	var recorded []time.Duration
	record := func(d time.Duration) {
		h.Record(d)
		recorded = append(recorded, d)
	}
	for _, b := range bounds {
		record(b - time.Microsecond)
		record(b + time.Microsecond)
		record(b + b/3)
	}
	record(0)
	record(1000 * time.Hour) // past the last bound: +Inf only
	upper, counts := h.Snapshot()
	m := constHistogram(prometheus.NewDesc("x_seconds", "x", nil, nil), upper, counts, h.SumSeconds())
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	hist := pb.GetHistogram()
	if got := hist.GetSampleCount(); got != uint64(len(recorded)) {
		t.Fatalf("count %d, want %d", got, len(recorded))
	}
	var wantSum float64
	for _, d := range recorded {
		wantSum += max(d, 0).Seconds()
	}
	if got := hist.GetSampleSum(); math.Abs(got-wantSum) > 1e-9*wantSum {
		t.Fatalf("sum %v, want %v", got, wantSum)
	}
	if len(hist.GetBucket()) != len(bounds) {
		t.Fatalf("%d buckets, want %d", len(hist.GetBucket()), len(bounds))
	}
	for j, b := range hist.GetBucket() {
		if b.GetUpperBound() != bounds[j].Seconds() {
			t.Fatalf("bucket %d: le %v, want %v", j, b.GetUpperBound(), bounds[j].Seconds())
		}
		var below uint64
		for _, d := range recorded {
			if d < bounds[j] {
				below++
			}
		}
		if b.GetCumulativeCount() != below {
			t.Fatalf("le %v: cumulative count %d, want %d (durations below it)", bounds[j], b.GetCumulativeCount(), below)
		}
	}
}

// TestHistogramEmptyHasEveryBucket: the layout does not depend on what was
// recorded, so a fresh queue exports the same series as a busy one.
func TestHistogramEmptyHasEveryBucket(t *testing.T) {
	m := constHistogram(prometheus.NewDesc("x_seconds", "x", nil, nil), nil, nil, 0)
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	if n := len(pb.GetHistogram().GetBucket()); n != len(bounds) {
		t.Fatalf("empty histogram exports %d buckets, want %d", n, len(bounds))
	}
}
