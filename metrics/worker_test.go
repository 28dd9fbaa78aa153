package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/metrics"
)

// TestWorkerCollector runs a worker over three messages (one finished, one
// failed for good, one retried then finished) and reads its series back.
func TestWorkerCollector(t *testing.T) {
	c, err := channel.New(channel.Options{MemQueueSize: 10, DeadLetter: func(*channel.Message, error) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan struct{}, 4)
	w, err := spillq.NewWorker(c, func(_ context.Context, m *channel.Message) error {
		defer func() { done <- struct{}{} }()
		switch {
		case string(m.Body) == "bad":
			return spillq.Permanent(errors.New("unparsable"))
		case string(m.Body) == "flaky" && m.Attempts == 1:
			return errors.New("once")
		}
		return nil
	}, spillq.WorkerOptions{Concurrency: 2, Backoff: func(uint16, error) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	for _, b := range []string{"ok", "bad", "flaky"} {
		c.Put(ctx, []byte(b))
	}
	for range 4 {
		<-done
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(metrics.NewWorkerCollector("jobs", w)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP spillq_worker_outcomes_total Handled messages by how they ended: finished, retried, dead_lettered (an error on the last attempt), failed (Permanent), snoozed, released (cut short by a shutdown).
# TYPE spillq_worker_outcomes_total counter
spillq_worker_outcomes_total{outcome="dead_lettered",queue="jobs"} 0
spillq_worker_outcomes_total{outcome="failed",queue="jobs"} 1
spillq_worker_outcomes_total{outcome="finished",queue="jobs"} 2
spillq_worker_outcomes_total{outcome="released",queue="jobs"} 0
spillq_worker_outcomes_total{outcome="retried",queue="jobs"} 1
spillq_worker_outcomes_total{outcome="snoozed",queue="jobs"} 0
# HELP spillq_worker_in_progress Handlers running now.
# TYPE spillq_worker_in_progress gauge
spillq_worker_in_progress{queue="jobs"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillq_worker_outcomes_total", "spillq_worker_in_progress"); err != nil {
		t.Fatal(err)
	}
	if h := histogramOf(t, reg, "spillq_worker_handler_duration_seconds"); h.GetSampleCount() != 4 {
		t.Fatalf("handler duration count %d, want 4 attempts", h.GetSampleCount())
	}
}
