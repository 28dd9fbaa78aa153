package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillq/spillq"
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
	c := metrics.NewCollector("jobs", q.Channel, q.Disk())
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP spillq_channel_finishes_total Messages finished.
# TYPE spillq_channel_finishes_total counter
spillq_channel_finishes_total{queue="jobs"} 12
# HELP spillq_channel_puts_total Messages accepted by Put.
# TYPE spillq_channel_puts_total counter
spillq_channel_puts_total{queue="jobs"} 20
# HELP spillq_channel_requeues_total Messages requeued by consumers.
# TYPE spillq_channel_requeues_total counter
spillq_channel_requeues_total{queue="jobs"} 1
# HELP spillq_channel_spills_total Messages written to the backend by Put.
# TYPE spillq_channel_spills_total counter
spillq_channel_spills_total{queue="jobs"} 15
# HELP spillq_channel_memory_capacity Size of the memory buffer (MemQueueSize), in messages.
# TYPE spillq_channel_memory_capacity gauge
spillq_channel_memory_capacity{queue="jobs"} 5
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
	problems, err := testutil.CollectAndLint(metrics.NewCollector("jobs", q.Channel, q.Disk()))
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
	reg.MustRegister(metrics.NewCollector("jobs", q.Channel, q.Disk()))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`spillq_channel_in_flight{queue="jobs"} 0`,
		`spillq_channel_ready{queue="jobs"} 1`,
		`spillq_disk_segments{queue="jobs"} 1`,
		`spillq_channel_latency_seconds_count{queue="jobs"} 12`,
		`spillq_disk_fsync_duration_seconds_bucket{queue="jobs",le="+Inf"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("scrape lacks %q:\n%s", want, body)
		}
	}
}

func TestNilParts(t *testing.T) {
	q := workload(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector("disk-only", nil, q.Disk()))
	if n := testutil.CollectAndCount(metrics.NewCollector("disk-only", nil, q.Disk())); n != 16 {
		t.Fatalf("disk-only collector exports %d metrics, want 16", n)
	}
}
