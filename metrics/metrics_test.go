package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/metrics"
)

// workload opens a queue with a memory buffer of 5, puts 20 messages (15
// spill), finishes 12 and requeues 1.
func workload(t *testing.T) *spillq.Queue {
	t.Helper()
	q, err := spillq.Open(t.TempDir(), spillq.Options{MemQueueSize: 5, Disk: diskqueue.Options{SyncEvery: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if err := q.Put(ctx, []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 12; i++ {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Finish()
	}
	m, _ := q.Receive(ctx)
	m.Requeue(0)
	return q
}

func TestCollectorValues(t *testing.T) {
	q := workload(t)
	c := metrics.NewQueueCollector("jobs", q)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP spillq_channel_finishes_total Messages finished.
# TYPE spillq_channel_finishes_total counter
spillq_channel_finishes_total{channel="",queue="jobs"} 12
# HELP spillq_channel_puts_total Messages accepted by Put.
# TYPE spillq_channel_puts_total counter
spillq_channel_puts_total{channel="",queue="jobs"} 20
# HELP spillq_channel_requeues_total Messages requeued by consumers.
# TYPE spillq_channel_requeues_total counter
spillq_channel_requeues_total{channel="",queue="jobs"} 1
# HELP spillq_channel_spills_total Messages written to the backend by Put.
# TYPE spillq_channel_spills_total counter
spillq_channel_spills_total{channel="",queue="jobs"} 15
# HELP spillq_channel_memory_capacity Size of the memory buffer (MemQueueSize), in messages.
# TYPE spillq_channel_memory_capacity gauge
spillq_channel_memory_capacity{channel="",queue="jobs"} 5
# HELP spillq_disk_puts_total Records accepted by Put since the queue was opened.
# TYPE spillq_disk_puts_total counter
spillq_disk_puts_total{queue="jobs"} 15
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"spillq_channel_finishes_total", "spillq_channel_puts_total", "spillq_channel_requeues_total",
		"spillq_channel_spills_total", "spillq_channel_memory_capacity", "spillq_disk_puts_total"); err != nil {
		t.Fatal(err)
	}
	// Histograms: 12 finishes observed end to end; every Put was fsynced.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "spillq_channel_latency_seconds":
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 12 {
				t.Fatalf("latency histogram holds %d samples, want 12", n)
			}
		case "spillq_disk_fsync_duration_seconds":
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n == 0 {
				t.Fatal("no fsync observed with SyncEvery 1")
			}
		}
	}
}

func TestMetricNamesFollowConventions(t *testing.T) {
	q := workload(t)
	problems, err := testutil.CollectAndLint(metrics.NewQueueCollector("jobs", q))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestScrape serves the registry over HTTP on loopback and scrapes it.
func TestScrape(t *testing.T) {
	q := workload(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewQueueCollector("jobs", q))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`spillq_channel_in_flight{channel="",queue="jobs"} 0`,
		`spillq_channel_ready{channel="",queue="jobs"} 1`,
		`spillq_disk_segments{queue="jobs"} 1`,
		`spillq_channel_latency_seconds_count{channel="",queue="jobs"} 12`, // the empty channel label of every channel series
		`spillq_disk_fsync_duration_seconds_bucket{queue="jobs",le="+Inf"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("scrape lacks %q:\n%s", want, body)
		}
	}
}

func TestNilParts(t *testing.T) {
	dq, err := diskqueue.Open(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dq.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector("disk-only", nil, dq))
	if n := testutil.CollectAndCount(metrics.NewCollector("disk-only", nil, dq)); n != 18 {
		t.Fatalf("disk-only collector exports %d metrics, want 18", n)
	}
}

// TestTwoQueuesOnOneRegistry registers the collectors of two queues on one
// registry, the normal case for a service, and checks that each series
// carries its own queue's figures.
func TestTwoQueuesOnOneRegistry(t *testing.T) {
	jobs := workload(t)
	emails, err := spillq.Open(t.TempDir(), spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer emails.Close()
	for i := 0; i < 3; i++ {
		if err := emails.Put(context.Background(), []byte("mail")); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(metrics.NewQueueCollector("jobs", jobs)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(metrics.NewQueueCollector("emails", emails)); err != nil {
		t.Fatalf("second queue's collector: %v", err)
	}
	want := `
# HELP spillq_channel_puts_total Messages accepted by Put.
# TYPE spillq_channel_puts_total counter
spillq_channel_puts_total{channel="",queue="emails"} 3
spillq_channel_puts_total{channel="",queue="jobs"} 20
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillq_channel_puts_total"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := len(mf.GetMetric()); n != 2 {
			t.Errorf("%s: %d series, want one per queue", mf.GetName(), n)
		}
	}
	// A second collector under a name already registered would export the
	// same series: refused with an error, not a panic.
	err = reg.Register(metrics.NewQueueCollector("jobs", emails))
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Fatalf("same name registered twice: got %v, want AlreadyRegisteredError", err)
	}
}

// histogramOf returns the one histogram of family name in a gather.
func histogramOf(t *testing.T, reg prometheus.Gatherer, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no %s in the gather", name)
	return nil
}

func upperBounds(h *dto.Histogram) []float64 {
	var b []float64
	for _, bucket := range h.GetBucket() {
		b = append(b, bucket.GetUpperBound())
	}
	return b
}

// TestHistogramLayoutIsFixed scrapes a queue before and after it has work:
// the buckets (the set of le values) must be the same, or rate() over
// them and sums across instances break.
func TestHistogramLayoutIsFixed(t *testing.T) {
	q, err := spillq.Open(t.TempDir(), spillq.Options{Disk: diskqueue.Options{SyncEvery: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewQueueCollector("jobs", q))
	const latency, fsync = "spillq_channel_latency_seconds", "spillq_disk_fsync_duration_seconds"
	before := map[string][]float64{latency: upperBounds(histogramOf(t, reg, latency)), fsync: upperBounds(histogramOf(t, reg, fsync))}

	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if err := q.Put(ctx, []byte("job")); err != nil {
			t.Fatal(err)
		}
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Finish()
	}
	for _, name := range []string{latency, fsync} {
		h := histogramOf(t, reg, name)
		if h.GetSampleCount() == 0 {
			t.Fatalf("%s: nothing recorded", name)
		}
		after := upperBounds(h)
		if len(after) != 36 || after[0] != 1e-6 || after[35] != float64(int64(1)<<35)*1e-6 {
			t.Fatalf("%s: bounds %v, want 2^k µs for k = 0..35", name, after)
		}
		if !slices.Equal(before[name], after) {
			t.Fatalf("%s: bounds changed with the data:\nbefore %v\nafter  %v", name, before[name], after)
		}
	}
	// The sum is the exact one the queue keeps, not an estimate from
	// bucket bounds.
	if got, want := histogramOf(t, reg, latency).GetSampleSum(), q.LatencySumSeconds(); got != want || want <= 0 {
		t.Fatalf("latency _sum %v, want %v", got, want)
	}
	if got, want := histogramOf(t, reg, fsync).GetSampleSum(), q.Disk().SyncLatencySumSeconds(); got != want || want <= 0 {
		t.Fatalf("fsync _sum %v, want %v", got, want)
	}
}

// TestCompactionMetrics: what a compaction removed shows in the disk
// metrics.
func TestCompactionMetrics(t *testing.T) {
	q, err := spillq.Open(t.TempDir(), spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	for i := range 200 {
		if err := q.PutWith(ctx, []byte("version"), channel.PutOptions{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if _, err := q.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for q.CompactStats().Removed == 0 {
		if _, err := q.Compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := q.Disk().Stats()
	if st.CompactedRecords != q.CompactStats().Removed || st.CompactedBytes == 0 {
		t.Fatalf("disk Stats: %d records, %d bytes compacted; the queue's compactions: %+v", st.CompactedRecords, st.CompactedBytes, q.CompactStats())
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewQueueCollector("jobs", q))
	want := fmt.Sprintf(`
# HELP spillq_disk_compacted_bytes_total Log bytes compaction freed since the queue was opened.
# TYPE spillq_disk_compacted_bytes_total counter
spillq_disk_compacted_bytes_total{queue="jobs"} %d
# HELP spillq_disk_compacted_records_total Records compaction removed from sealed segments since the queue was opened.
# TYPE spillq_disk_compacted_records_total counter
spillq_disk_compacted_records_total{queue="jobs"} %d
`, st.CompactedBytes, st.CompactedRecords)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillq_disk_compacted_records_total", "spillq_disk_compacted_bytes_total"); err != nil {
		t.Fatal(err)
	}
}
