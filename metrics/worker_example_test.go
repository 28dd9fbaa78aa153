package metrics_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/metrics"
)

// A worker's collector registers beside its queue's, on one registry:
// spillq_worker_* with the same queue label.
func ExampleNewWorkerCollector() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx, stop := context.WithCancel(context.Background())
	w, err := spillq.NewWorker(q, func(context.Context, *spillq.Message) error {
		stop() // one job, then the worker stops
		return nil
	}, spillq.WorkerOptions{Concurrency: 1})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewQueueCollector("jobs", q), metrics.NewWorkerCollector("jobs", w))
	q.Put(ctx, []byte("resize image 1"))
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "spillq_worker_outcomes_total", "spillq_worker_handler_duration_seconds")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker series:", n, "finished:", w.Stats().Finished)
	// Output:
	// worker series: 7 finished: 1
}
