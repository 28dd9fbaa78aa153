// Package bridgemetrics exposes an [nsqbridge.Publisher]'s and an
// [nsqbridge.Consumer]'s figures to Prometheus. It lives beside the bridge,
// not in package metrics, so that a service that exports its queues'
// metrics does not compile the bridge and go-nsq unless it uses them.
//
//	reg.MustRegister(bridgemetrics.NewPublisherCollector("orders", pub))
package bridgemetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillq/spillq/internal/promtable"
	"github.com/spillq/spillq/nsqbridge"
)

// The collectors name their metrics spillq_nsqbridge_publisher_*
// and spillq_nsqbridge_consumer_*, and carry the name they are given as a
// constant "queue" label, so several publishers and consumers can share a
// registry.

type pubStats = nsqbridge.PublisherStats

var publisherSpecs = []promtable.Spec[pubStats]{
	promtable.Counter("spillq_nsqbridge_publisher_published_total", "Messages accepted by Publish, PublishTo and DeferredPublish since the publisher opened.", func(s pubStats) float64 { return float64(s.Published) }),
	promtable.Counter("spillq_nsqbridge_publisher_forwarded_total", "Messages nsqd acknowledged since the publisher opened.", func(s pubStats) float64 { return float64(s.Forwarded) }),
	promtable.Gauge("spillq_nsqbridge_publisher_pending", "Messages in the local queue not yet acknowledged by nsqd.", func(s pubStats) float64 { return float64(s.Pending) }),
	promtable.Gauge("spillq_nsqbridge_publisher_oldest_pending_age_seconds", "Age of the oldest message the forwarder holds that nsqd has not acknowledged; 0 when none.", func(s pubStats) float64 { return s.OldestPending.Seconds() }),
	promtable.Counter("spillq_nsqbridge_publisher_dead_letters_total", "Messages handed to the dead-letter handler.", func(s pubStats) float64 { return float64(s.DeadLetters) }),
	promtable.Counter("spillq_nsqbridge_publisher_reconnects_total", "Times an nsqd node that had failed was connected again.", func(s pubStats) float64 { return float64(s.Reconnects) }),
	promtable.Counter("spillq_nsqbridge_publisher_failovers_total", "Batches that failed on one nsqd node and were then acknowledged by another.", func(s pubStats) float64 { return float64(s.Failovers) }),
	promtable.Gauge("spillq_nsqbridge_publisher_nodes", "nsqd nodes known (configured or discovered).", func(s pubStats) float64 { return float64(len(s.Nodes)) }),
	promtable.Gauge("spillq_nsqbridge_publisher_nodes_connected", "nsqd nodes connected now.", func(s pubStats) float64 { return float64(s.ConnectedNodes) }),
	promtable.Gauge("spillq_nsqbridge_publisher_local_disk_bytes", "Bytes of the local queue's files.", func(s pubStats) float64 { return float64(s.Local.DiskBytes) }),
}

// publisherErrors are the kinds of spillq_nsqbridge_publisher_errors_total.
var publisherErrors = []promtable.Series[pubStats]{
	{Label: "invalid", Value: func(s pubStats) float64 { return float64(s.Invalid) }},
	{Label: "refused", Value: func(s pubStats) float64 { return float64(s.Refused) }},
	{Label: "bad_record", Value: func(s pubStats) float64 { return float64(s.BadRecords) }},
	{Label: "send", Value: func(s pubStats) float64 { return float64(s.SendErrors) }},
	{Label: "connect", Value: func(s pubStats) float64 { return float64(s.ConnectErrors) }},
	{Label: "lookupd", Value: func(s pubStats) float64 { return float64(s.LookupdErrors) }},
}

// PublisherCollector is a prometheus.Collector over an
// [nsqbridge.Publisher]. It reads the publisher's Stats at each scrape; it
// is safe for concurrent use.
type PublisherCollector struct {
	p             *nsqbridge.Publisher
	table         promtable.Table[pubStats]
	errors        promtable.Family[pubStats]
	nodeConnected *prometheus.Desc
	nodeForwarded *prometheus.Desc
	nodeErrors    *prometheus.Desc
}

// NewPublisherCollector returns a collector for the publisher called name.
//
//	reg.MustRegister(bridgemetrics.NewPublisherCollector("orders", pub))
func NewPublisherCollector(name string, p *nsqbridge.Publisher) *PublisherCollector {
	labels := prometheus.Labels{"queue": name}
	return &PublisherCollector{
		p:     p,
		table: promtable.New(name, publisherSpecs),
		errors: promtable.CounterFamily(name, "spillq_nsqbridge_publisher_errors_total",
			"Errors by kind: invalid (refused by Publish), refused (by nsqd; dead-lettered), bad_record (local record dead-lettered), send, connect, lookupd.",
			"kind", publisherErrors),
		nodeConnected: prometheus.NewDesc("spillq_nsqbridge_publisher_node_connected", "1 if the nsqd node is connected and its last send did not fail.", []string{"nsqd"}, labels),
		nodeForwarded: prometheus.NewDesc("spillq_nsqbridge_publisher_node_forwarded_total", "Messages the nsqd node acknowledged.", []string{"nsqd"}, labels),
		nodeErrors:    prometheus.NewDesc("spillq_nsqbridge_publisher_node_errors_total", "Failed connection attempts and sends to the nsqd node.", []string{"nsqd"}, labels),
	}
}

// Describe sends every metric's description.
func (c *PublisherCollector) Describe(out chan<- *prometheus.Desc) {
	c.table.Describe(out)
	c.errors.Describe(out)
	out <- c.nodeConnected
	out <- c.nodeForwarded
	out <- c.nodeErrors
}

// Collect reads the publisher's Stats and sends them.
func (c *PublisherCollector) Collect(out chan<- prometheus.Metric) {
	st := c.p.Stats()
	c.table.Collect(out, st)
	c.errors.Collect(out, st)
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

var consumerSpecs = []promtable.Spec[conStats]{
	promtable.Counter("spillq_nsqbridge_consumer_received_total", "Messages handed out by Receive.", func(s conStats) float64 { return float64(s.Received) }),
	promtable.Counter("spillq_nsqbridge_consumer_finishes_total", "Messages finished.", func(s conStats) float64 { return float64(s.Finished) }),
	promtable.Counter("spillq_nsqbridge_consumer_requeues_total", "Messages requeued to nsqd.", func(s conStats) float64 { return float64(s.Requeued) }),
	promtable.Counter("spillq_nsqbridge_consumer_dead_letters_total", "Messages handed to the dead-letter handler after their last attempt.", func(s conStats) float64 { return float64(s.DeadLetters) }),
	promtable.Counter("spillq_nsqbridge_consumer_timeouts_total", "Messages whose timeout ran out before they were answered; nsqd delivers them again.", func(s conStats) float64 { return float64(s.TimedOut) }),
	promtable.Gauge("spillq_nsqbridge_consumer_in_flight", "Messages received and not yet answered.", func(s conStats) float64 { return float64(s.InFlight) }),
	promtable.Gauge("spillq_nsqbridge_consumer_oldest_in_flight_age_seconds", "How long ago the oldest message in flight arrived; 0 when none.", func(s conStats) float64 { return s.OldestInFlight.Seconds() }),
	promtable.Gauge("spillq_nsqbridge_consumer_connections", "nsqd connections open now.", func(s conStats) float64 { return float64(s.Connections) }),
}

// ConsumerCollector is a prometheus.Collector over an
// [nsqbridge.Consumer]. It reads the consumer's Stats at each scrape; it
// is safe for concurrent use.
type ConsumerCollector struct {
	c     *nsqbridge.Consumer
	table promtable.Table[conStats]
}

// NewConsumerCollector returns a collector for the consumer called name.
func NewConsumerCollector(name string, c *nsqbridge.Consumer) *ConsumerCollector {
	return &ConsumerCollector{c: c, table: promtable.New(name, consumerSpecs)}
}

// Describe sends every metric's description.
func (c *ConsumerCollector) Describe(out chan<- *prometheus.Desc) { c.table.Describe(out) }

// Collect reads the consumer's Stats and sends them.
func (c *ConsumerCollector) Collect(out chan<- prometheus.Metric) { c.table.Collect(out, c.c.Stats()) }
