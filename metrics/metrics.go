// Package metrics exposes spillq's figures to Prometheus. It is kept out of
// the core packages so that a service embedding spillq compiles Prometheus
// only if it imports this package.
//
//	reg.MustRegister(metrics.NewCollector("jobs", q.Channel, q.Disk()))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Every metric carries a "queue" label with the name given to NewCollector.
// Names follow Prometheus conventions: spillq_channel_* and spillq_disk_*,
// counters end in _total, durations are in seconds, sizes in bytes.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// Collector is a prometheus.Collector over a channel and its disk queue.
// Either may be nil. It reads their Stats at each scrape; it is safe for
// concurrent use.
type Collector struct {
	name string
	ch   *channel.Channel
	dq   *diskqueue.Queue
}

// NewCollector returns a collector for the queue called name.
func NewCollector(name string, ch *channel.Channel, dq *diskqueue.Queue) *Collector {
	return &Collector{name: name, ch: ch, dq: dq}
}

type metric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

func newMetric(name, help string, kind prometheus.ValueType) metric {
	return metric{prometheus.NewDesc(name, help, []string{"queue"}, nil), kind}
}

var (
	chMemoryDepth   = newMetric("spillq_channel_memory_depth", "Messages in the memory buffer.", prometheus.GaugeValue)
	chMemoryBound   = newMetric("spillq_channel_memory_capacity", "Size of the memory buffer (MemQueueSize), in messages.", prometheus.GaugeValue)
	chDiskDepth     = newMetric("spillq_channel_disk_depth", "Messages in the backend waiting for delivery.", prometheus.GaugeValue)
	chInFlight      = newMetric("spillq_channel_in_flight", "Messages delivered and not yet finished or requeued.", prometheus.GaugeValue)
	chDeferred      = newMetric("spillq_channel_deferred", "Messages waiting for their due time.", prometheus.GaugeValue)
	chReady         = newMetric("spillq_channel_ready", "Requeued or timed-out messages waiting for delivery.", prometheus.GaugeValue)
	chPuts          = newMetric("spillq_channel_puts_total", "Messages accepted by Put.", prometheus.CounterValue)
	chSpills        = newMetric("spillq_channel_spills_total", "Messages written to the backend by Put.", prometheus.CounterValue)
	chRequeues      = newMetric("spillq_channel_requeues_total", "Messages requeued by consumers.", prometheus.CounterValue)
	chTimeouts      = newMetric("spillq_channel_timeouts_total", "Deliveries that timed out.", prometheus.CounterValue)
	chFinishes      = newMetric("spillq_channel_finishes_total", "Messages finished.", prometheus.CounterValue)
	chDeadLetters   = newMetric("spillq_channel_dead_letters_total", "Messages handed to the dead-letter handler.", prometheus.CounterValue)
	chExpired       = newMetric("spillq_channel_expired_total", "Dead letters that expired before delivery.", prometheus.CounterValue)
	chBadRecords    = newMetric("spillq_channel_bad_records_total", "Backend records that were not channel messages.", prometheus.CounterValue)
	chLatency       = prometheus.NewDesc("spillq_channel_latency_seconds", "End-to-end latency from Put to Finish; under a backlog one finish in 8 is timed and stands for the others.", []string{"queue"}, nil)
	dqDepth         = newMetric("spillq_disk_depth", "Records on disk not yet acknowledged.", prometheus.GaugeValue)
	dqInFlight      = newMetric("spillq_disk_in_flight", "Records read and not yet acknowledged.", prometheus.GaugeValue)
	dqBytes         = newMetric("spillq_disk_bytes", "Bytes of log, index and time-index files.", prometheus.GaugeValue)
	dqSegments      = newMetric("spillq_disk_segments", "Segment files on disk.", prometheus.GaugeValue)
	dqFirstSeq      = newMetric("spillq_disk_first_seq", "Oldest record still on disk.", prometheus.GaugeValue)
	dqReadSeq       = newMetric("spillq_disk_read_seq", "Read cursor: oldest record not acknowledged.", prometheus.GaugeValue)
	dqWriteSeq      = newMetric("spillq_disk_write_seq", "Write cursor: the seq the next Put gets.", prometheus.GaugeValue)
	dqPuts          = newMetric("spillq_disk_puts_total", "Records accepted by Put since the queue was opened.", prometheus.CounterValue)
	dqAcks          = newMetric("spillq_disk_acks_total", "Records acknowledged since the queue was opened.", prometheus.CounterValue)
	dqSyncs         = newMetric("spillq_disk_syncs_total", "fsyncs of the log since the queue was opened.", prometheus.CounterValue)
	dqCorrupt       = newMetric("spillq_disk_corrupt_records_total", "Records skipped because their bytes failed a check.", prometheus.CounterValue)
	dqBadFiles      = newMetric("spillq_disk_bad_files_total", "Quarantine (.bad) files written since the queue was opened.", prometheus.CounterValue)
	dqIndexRebuilds = newMetric("spillq_disk_index_rebuilds_total", "Index files rebuilt from their log.", prometheus.CounterValue)
	dqReadErrors    = newMetric("spillq_disk_read_errors_total", "I/O errors returned by reads (not corruption).", prometheus.CounterValue)
	dqRetries       = newMetric("spillq_disk_retried_writes_total", "Batches written again after the disk was full.", prometheus.CounterValue)
	dqSyncLatency   = prometheus.NewDesc("spillq_disk_fsync_duration_seconds", "Duration of fsyncs of the log.", []string{"queue"}, nil)
)

// One table per layer: each metric with the Stats field it reports, so
// Describe and Collect cannot drift apart.
var channelMetrics = []struct {
	metric
	value func(channel.Stats) float64
}{
	{chMemoryDepth, func(s channel.Stats) float64 { return float64(s.MemoryDepth) }},
	{chMemoryBound, func(s channel.Stats) float64 { return float64(s.MemoryBound) }},
	{chDiskDepth, func(s channel.Stats) float64 { return float64(s.DiskDepth) }},
	{chInFlight, func(s channel.Stats) float64 { return float64(s.InFlight) }},
	{chDeferred, func(s channel.Stats) float64 { return float64(s.Deferred) }},
	{chReady, func(s channel.Stats) float64 { return float64(s.Ready) }},
	{chPuts, func(s channel.Stats) float64 { return float64(s.Puts) }},
	{chSpills, func(s channel.Stats) float64 { return float64(s.Spills) }},
	{chRequeues, func(s channel.Stats) float64 { return float64(s.Requeues) }},
	{chTimeouts, func(s channel.Stats) float64 { return float64(s.Timeouts) }},
	{chFinishes, func(s channel.Stats) float64 { return float64(s.Finishes) }},
	{chDeadLetters, func(s channel.Stats) float64 { return float64(s.DeadLetters) }},
	{chExpired, func(s channel.Stats) float64 { return float64(s.Expired) }},
	{chBadRecords, func(s channel.Stats) float64 { return float64(s.BadRecords) }},
}

var diskMetrics = []struct {
	metric
	value func(diskqueue.Stats) float64
}{
	{dqDepth, func(s diskqueue.Stats) float64 { return float64(s.Depth) }},
	{dqInFlight, func(s diskqueue.Stats) float64 { return float64(s.InFlight) }},
	{dqBytes, func(s diskqueue.Stats) float64 { return float64(s.DiskBytes) }},
	{dqSegments, func(s diskqueue.Stats) float64 { return float64(s.Segments) }},
	{dqFirstSeq, func(s diskqueue.Stats) float64 { return float64(s.FirstSeq) }},
	{dqReadSeq, func(s diskqueue.Stats) float64 { return float64(s.ReadSeq) }},
	{dqWriteSeq, func(s diskqueue.Stats) float64 { return float64(s.WriteSeq) }},
	{dqPuts, func(s diskqueue.Stats) float64 { return float64(s.Puts) }},
	{dqAcks, func(s diskqueue.Stats) float64 { return float64(s.Acks) }},
	{dqSyncs, func(s diskqueue.Stats) float64 { return float64(s.Syncs) }},
	{dqCorrupt, func(s diskqueue.Stats) float64 { return float64(s.CorruptRecords) }},
	{dqBadFiles, func(s diskqueue.Stats) float64 { return float64(s.BadFiles) }},
	{dqIndexRebuilds, func(s diskqueue.Stats) float64 { return float64(s.IndexRebuilds) }},
	{dqReadErrors, func(s diskqueue.Stats) float64 { return float64(s.ReadErrors) }},
	{dqRetries, func(s diskqueue.Stats) float64 { return float64(s.RetriedWrites) }},
}

// Describe sends every metric's description.
func (c *Collector) Describe(out chan<- *prometheus.Desc) {
	if c.ch != nil {
		for _, m := range channelMetrics {
			out <- m.desc
		}
		out <- chLatency
	}
	if c.dq != nil {
		for _, m := range diskMetrics {
			out <- m.desc
		}
		out <- dqSyncLatency
	}
}

// Collect reads the queue's Stats and sends them.
func (c *Collector) Collect(out chan<- prometheus.Metric) {
	if c.ch != nil {
		st := c.ch.Stats()
		for _, m := range channelMetrics {
			out <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(st), c.name)
		}
		out <- histogram(chLatency, c.name)(c.ch.LatencyBuckets())
	}
	if c.dq != nil {
		st := c.dq.Stats()
		for _, m := range diskMetrics {
			out <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(st), c.name)
		}
		out <- histogram(dqSyncLatency, c.name)(c.dq.SyncLatencyBuckets())
	}
}

// histogram turns spillq's bucket snapshot into a Prometheus histogram.
// spillq's buckets are [lower, upper); Prometheus's are (-inf, le], so a
// duration on a bound lands one bucket higher here, a 19% blur at most, the
// resolution of the underlying histogram anyway. The sum is estimated from
// bucket bounds, since spillq does not keep one.
func histogram(desc *prometheus.Desc, name string) func([]time.Duration, []uint64) prometheus.Metric {
	return func(upper []time.Duration, counts []uint64) prometheus.Metric {
		buckets := make(map[float64]uint64, len(upper))
		var total uint64
		var sum float64
		for i, u := range upper {
			total += counts[i]
			buckets[u.Seconds()] = total
			sum += float64(counts[i]) * u.Seconds()
		}
		return prometheus.MustNewConstHistogram(desc, total, sum, buckets, name)
	}
}
