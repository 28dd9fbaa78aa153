package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/promtable"
)

// WorkerCollector exports a spillq.Worker's figures as spillq_worker_*,
// with the name it is given as a constant "queue" label (give a worker the
// name of the queue it works, and its series sit beside that queue's).
type WorkerCollector struct {
	w        *spillq.Worker
	table    promtable.Table[spillq.WorkerStats]
	outcomes promtable.Family[spillq.WorkerStats]
	duration *prometheus.Desc
}

// NewWorkerCollector returns a collector for w, labelled queue=name.
func NewWorkerCollector(name string, w *spillq.Worker) *WorkerCollector {
	labels := prometheus.Labels{"queue": name}
	return &WorkerCollector{
		w:     w,
		table: promtable.New(name, workerSpecs),
		outcomes: promtable.CounterFamily(name, "spillq_worker_outcomes_total",
			"Handled messages by how they ended: finished, retried, dead_lettered (an error on the last attempt), failed (Permanent), snoozed, released (cut short by a shutdown).",
			"outcome", workerOutcomes),
		duration: prometheus.NewDesc("spillq_worker_handler_duration_seconds", "How long the handler ran, per attempt.", nil, labels),
	}
}

var workerSpecs = []promtable.Spec[spillq.WorkerStats]{
	promtable.Gauge("spillq_worker_in_progress", "Handlers running now.", func(s spillq.WorkerStats) float64 { return float64(s.InProgress) }),
	promtable.Counter("spillq_worker_panics_total", "Handler panics (each also counted in its outcome).", func(s spillq.WorkerStats) float64 { return float64(s.Panics) }),
	promtable.Counter("spillq_worker_answer_errors_total", "Answers the source refused (lease lost, source closed); it delivers those messages again.", func(s spillq.WorkerStats) float64 { return float64(s.AnswerErrors) }),
}

var workerOutcomes = []promtable.Series[spillq.WorkerStats]{
	{Label: "finished", Value: func(s spillq.WorkerStats) float64 { return float64(s.Finished) }},
	{Label: "retried", Value: func(s spillq.WorkerStats) float64 { return float64(s.Retried) }},
	{Label: "dead_lettered", Value: func(s spillq.WorkerStats) float64 { return float64(s.DeadLettered) }},
	{Label: "failed", Value: func(s spillq.WorkerStats) float64 { return float64(s.Failed) }},
	{Label: "snoozed", Value: func(s spillq.WorkerStats) float64 { return float64(s.Snoozed) }},
	{Label: "released", Value: func(s spillq.WorkerStats) float64 { return float64(s.Released) }},
}

// Describe sends every metric's description.
func (c *WorkerCollector) Describe(out chan<- *prometheus.Desc) {
	c.table.Describe(out)
	c.outcomes.Describe(out)
	out <- c.duration
}

// Collect reads the worker's Stats and sends them.
func (c *WorkerCollector) Collect(out chan<- prometheus.Metric) {
	st := c.w.Stats()
	c.table.Collect(out, st)
	c.outcomes.Collect(out, st)
	upper, counts := c.w.DurationBuckets()
	out <- constHistogram(c.duration, upper, counts, c.w.DurationSumSeconds())
}
