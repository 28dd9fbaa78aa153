// Package promtable builds a Prometheus collector's plain metrics from one
// table, so that the metrics package and nsqbridge/bridgemetrics describe
// and collect them the same way without either importing the other.
package promtable

import "github.com/prometheus/client_golang/prometheus"

// Spec is one metric before its Desc is made for a queue name: how to
// read it from the stats S a collector reports. Counter and Gauge make
// one.
type Spec[S any] struct {
	name, help string
	kind       prometheus.ValueType
	value      func(S) float64
}

// Counter is a counter read from S by value.
func Counter[S any](name, help string, value func(S) float64) Spec[S] {
	return Spec[S]{name, help, prometheus.CounterValue, value}
}

// Gauge is a gauge read from S by value.
func Gauge[S any](name, help string, value func(S) float64) Spec[S] {
	return Spec[S]{name, help, prometheus.GaugeValue, value}
}

type metric[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
}

// Table is a collector's metrics, one table feeding both Describe and
// Collect, so the two cannot disagree.
type Table[S any] []metric[S]

// New makes specs' Descs, each with the constant label queue=queue, so
// that collectors of several queues can share a registry, and the
// variable labels named (whose values each Collect then gives).
func New[S any](queue string, specs []Spec[S], variable ...string) Table[S] {
	t := make(Table[S], len(specs))
	for i, s := range specs {
		t[i] = metric[S]{prometheus.NewDesc(s.name, s.help, variable, prometheus.Labels{"queue": queue}), s.kind, s.value}
	}
	return t
}

// Describe sends every metric's Desc.
func (t Table[S]) Describe(out chan<- *prometheus.Desc) {
	for _, m := range t {
		out <- m.desc
	}
}

// Collect sends every metric's value read from st, with the values of
// the table's variable labels.
func (t Table[S]) Collect(out chan<- prometheus.Metric, st S, labelValues ...string) {
	for _, m := range t {
		out <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(st), labelValues...)
	}
}

// Series is one series of a [Family]: its label's value, and how to read
// it from the stats S.
type Series[S any] struct {
	Label string
	Value func(S) float64
}

// Family is one metric with a variable label, a series for each of its
// Series, as a table is several metrics: one list feeding both Describe
// and Collect.
type Family[S any] struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	series []Series[S]
}

// CounterFamily makes the counter name, labelled queue=queue, with one
// series for each of series, told apart by the variable label label.
func CounterFamily[S any](queue, name, help, label string, series []Series[S]) Family[S] {
	return Family[S]{prometheus.NewDesc(name, help, []string{label}, prometheus.Labels{"queue": queue}), prometheus.CounterValue, series}
}

// Describe sends the family's Desc.
func (f Family[S]) Describe(out chan<- *prometheus.Desc) { out <- f.desc }

// Collect sends every series' value read from st.
func (f Family[S]) Collect(out chan<- prometheus.Metric, st S) {
	for _, s := range f.series {
		out <- prometheus.MustNewConstMetric(f.desc, f.kind, s.Value(st), s.Label)
	}
}
