package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillq/spillq/nsqbridge"
)

// The nsqbridge collectors name their metrics spillq_nsqbridge_publisher_*
// and spillq_nsqbridge_consumer_*, and carry the name they are given as a
// constant "queue" label, so several publishers and consumers can share a
// registry.

// bridgeMetric is one metric of an nsqbridge collector and how to read it
// from the Stats it reports.
type bridgeMetric[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
}

// bridgeTable is a collector's metrics, one table feeding both Describe and
// Collect.
type bridgeTable[S any] []bridgeMetric[S]

// bridgeSpec is one row of a bridgeTable before its Desc is made for a
// queue name.
type bridgeSpec[S any] struct {
	name, help string
	kind       prometheus.ValueType
	value      func(S) float64
}

func newBridgeTable[S any](queue string, specs []bridgeSpec[S]) bridgeTable[S] {
	t := make(bridgeTable[S], len(specs))
	for i, s := range specs {
		t[i] = bridgeMetric[S]{prometheus.NewDesc(s.name, s.help, nil, prometheus.Labels{"queue": queue}), s.kind, s.value}
	}
	return t
}

func (t bridgeTable[S]) describe(out chan<- *prometheus.Desc) {
	for _, m := range t {
		out <- m.desc
	}
}

func (t bridgeTable[S]) collect(out chan<- prometheus.Metric, st S) {
	for _, m := range t {
		out <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(st))
	}
}

type pubStats = nsqbridge.PublisherStats

var publisherSpecs = []bridgeSpec[pubStats]{
	{"spillq_nsqbridge_publisher_published_total", "Messages accepted by Publish, PublishTo and DeferredPublish since the publisher opened.", prometheus.CounterValue, func(s pubStats) float64 { return float64(s.Published) }},
	{"spillq_nsqbridge_publisher_forwarded_total", "Messages nsqd acknowledged since the publisher opened.", prometheus.CounterValue, func(s pubStats) float64 { return float64(s.Forwarded) }},
	{"spillq_nsqbridge_publisher_pending", "Messages in the local queue not yet acknowledged by nsqd.", prometheus.GaugeValue, func(s pubStats) float64 { return float64(s.Pending) }},
	{"spillq_nsqbridge_publisher_oldest_pending_age_seconds", "Age of the oldest message the forwarder holds that nsqd has not acknowledged; 0 when none.", prometheus.GaugeValue, func(s pubStats) float64 { return s.OldestPending.Seconds() }},
	{"spillq_nsqbridge_publisher_dead_letters_total", "Messages handed to the dead-letter handler.", prometheus.CounterValue, func(s pubStats) float64 { return float64(s.DeadLetters) }},
	{"spillq_nsqbridge_publisher_reconnects_total", "Times an nsqd node that had failed was connected again.", prometheus.CounterValue, func(s pubStats) float64 { return float64(s.Reconnects) }},
	{"spillq_nsqbridge_publisher_failovers_total", "Batches that failed on one nsqd node and were then acknowledged by another.", prometheus.CounterValue, func(s pubStats) float64 { return float64(s.Failovers) }},
	{"spillq_nsqbridge_publisher_nodes", "nsqd nodes known (configured or discovered).", prometheus.GaugeValue, func(s pubStats) float64 { return float64(len(s.Nodes)) }},
	{"spillq_nsqbridge_publisher_nodes_connected", "nsqd nodes connected now.", prometheus.GaugeValue, func(s pubStats) float64 { return float64(s.ConnectedNodes) }},
	{"spillq_nsqbridge_publisher_local_disk_bytes", "Bytes of the local queue's files.", prometheus.GaugeValue, func(s pubStats) float64 { return float64(s.Local.DiskBytes) }},
}

// publisherErrors are the kinds of spillq_nsqbridge_publisher_errors_total.
var publisherErrors = []struct {
	kind  string
	value func(pubStats) int64
}{
	{"invalid", func(s pubStats) int64 { return s.Invalid }},
	{"refused", func(s pubStats) int64 { return s.Refused }},
	{"bad_record", func(s pubStats) int64 { return s.BadRecords }},
	{"send", func(s pubStats) int64 { return s.SendErrors }},
	{"connect", func(s pubStats) int64 { return s.ConnectErrors }},
	{"lookupd", func(s pubStats) int64 { return s.LookupdErrors }},
}

// PublisherCollector is a prometheus.Collector over an
// [nsqbridge.Publisher]. It reads the publisher's Stats at each scrape; it
// is safe for concurrent use.
type PublisherCollector struct {
	p             *nsqbridge.Publisher
	table         bridgeTable[pubStats]
	errors        *prometheus.Desc
	nodeConnected *prometheus.Desc
	nodeForwarded *prometheus.Desc
	nodeErrors    *prometheus.Desc
}

// NewPublisherCollector returns a collector for the publisher called name.
//
//	reg.MustRegister(metrics.NewPublisherCollector("orders", pub))
func NewPublisherCollector(name string, p *nsqbridge.Publisher) *PublisherCollector {
	labels := prometheus.Labels{"queue": name}
	return &PublisherCollector{
		p:     p,
		table: newBridgeTable(name, publisherSpecs),
		errors: prometheus.NewDesc("spillq_nsqbridge_publisher_errors_total",
			"Errors by kind: invalid (refused by Publish), refused (by nsqd; dead-lettered), bad_record (local record dead-lettered), send, connect, lookupd.",
			[]string{"kind"}, labels),
		nodeConnected: prometheus.NewDesc("spillq_nsqbridge_publisher_node_connected", "1 if the nsqd node is connected and its last send did not fail.", []string{"nsqd"}, labels),
		nodeForwarded: prometheus.NewDesc("spillq_nsqbridge_publisher_node_forwarded_total", "Messages the nsqd node acknowledged.", []string{"nsqd"}, labels),
		nodeErrors:    prometheus.NewDesc("spillq_nsqbridge_publisher_node_errors_total", "Failed connection attempts and sends to the nsqd node.", []string{"nsqd"}, labels),
	}
}

// Describe sends every metric's description.
func (c *PublisherCollector) Describe(out chan<- *prometheus.Desc) {
	c.table.describe(out)
	out <- c.errors
	out <- c.nodeConnected
	out <- c.nodeForwarded
	out <- c.nodeErrors
}

// Collect reads the publisher's Stats and sends them.
func (c *PublisherCollector) Collect(out chan<- prometheus.Metric) {
	st := c.p.Stats()
	c.table.collect(out, st)
	for _, e := range publisherErrors {
		out <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(e.value(st)), e.kind)
	}
	for _, n := range st.Nodes {
		connected := 0.0
		if n.Connected {
			connected = 1
		}
		out <- prometheus.MustNewConstMetric(c.nodeConnected, prometheus.GaugeValue, connected, n.Addr)
		out <- prometheus.MustNewConstMetric(c.nodeForwarded, prometheus.CounterValue, float64(n.Forwarded), n.Addr)
		out <- prometheus.MustNewConstMetric(c.nodeErrors, prometheus.CounterValue, float64(n.Errors), n.Addr)
	}
}

type conStats = nsqbridge.ConsumerStats

var consumerSpecs = []bridgeSpec[conStats]{
	{"spillq_nsqbridge_consumer_received_total", "Messages handed out by Receive.", prometheus.CounterValue, func(s conStats) float64 { return float64(s.Received) }},
	{"spillq_nsqbridge_consumer_finishes_total", "Messages finished.", prometheus.CounterValue, func(s conStats) float64 { return float64(s.Finished) }},
	{"spillq_nsqbridge_consumer_requeues_total", "Messages requeued to nsqd.", prometheus.CounterValue, func(s conStats) float64 { return float64(s.Requeued) }},
	{"spillq_nsqbridge_consumer_dead_letters_total", "Messages handed to the dead-letter handler after their last attempt.", prometheus.CounterValue, func(s conStats) float64 { return float64(s.DeadLetters) }},
	{"spillq_nsqbridge_consumer_timeouts_total", "Messages whose timeout ran out before they were answered; nsqd delivers them again.", prometheus.CounterValue, func(s conStats) float64 { return float64(s.TimedOut) }},
	{"spillq_nsqbridge_consumer_in_flight", "Messages received and not yet answered.", prometheus.GaugeValue, func(s conStats) float64 { return float64(s.InFlight) }},
	{"spillq_nsqbridge_consumer_oldest_in_flight_age_seconds", "How long ago the oldest message in flight arrived; 0 when none.", prometheus.GaugeValue, func(s conStats) float64 { return s.OldestInFlight.Seconds() }},
	{"spillq_nsqbridge_consumer_connections", "nsqd connections open now.", prometheus.GaugeValue, func(s conStats) float64 { return float64(s.Connections) }},
}

// ConsumerCollector is a prometheus.Collector over an
// [nsqbridge.Consumer]. It reads the consumer's Stats at each scrape; it
// is safe for concurrent use.
type ConsumerCollector struct {
	c     *nsqbridge.Consumer
	table bridgeTable[conStats]
}

// NewConsumerCollector returns a collector for the consumer called name.
func NewConsumerCollector(name string, c *nsqbridge.Consumer) *ConsumerCollector {
	return &ConsumerCollector{c: c, table: newBridgeTable(name, consumerSpecs)}
}

// Describe sends every metric's description.
func (c *ConsumerCollector) Describe(out chan<- *prometheus.Desc) { c.table.describe(out) }

// Collect reads the consumer's Stats and sends them.
func (c *ConsumerCollector) Collect(out chan<- prometheus.Metric) { c.table.collect(out, c.c.Stats()) }
