// Package metrics exposes spillq's figures to Prometheus. It is kept out of
// the core packages so that a service embedding spillq compiles Prometheus
// only if it imports this package.
//
//	reg.MustRegister(
//		metrics.NewQueueCollector("jobs", jobs),
//		metrics.NewQueueCollector("emails", emails),
//	)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// [NewQueueCollector] serves a *spillq.Queue: its channel, its disk log and
// the letters its dead-letter store holds (spillq_channel_dead_letters_stored).
// [NewCollector] serves the parts of a queue paired by hand: a
// *channel.Channel and the *diskqueue.Queue under it.
//
// Each collector serves one queue, and every metric it exports carries a
// constant "queue" label with the name given to it, so the
// collectors of a service's queues register side by side on one registry;
// two collectors with the same name on one registry are refused
// (prometheus.AlreadyRegisteredError), as their series would collide.
// Names follow Prometheus conventions: spillq_channel_* and spillq_disk_*,
// counters end in _total, durations are in seconds, sizes in bytes.
//
// A topic (spillq.OpenTopic) has a collector of its own,
// [NewTopicCollector]: the same channel metrics, once per channel with a
// "channel" label beside "queue", each channel's lag, and the log's disk
// metrics once.
//
// A [spillq.Worker] has one too, NewWorkerCollector: its handlers in
// progress, outcomes (finished, retried, dead-lettered, failed, snoozed,
// released), panics, and a histogram of handler durations.
//
// The collectors of an nsqbridge Publisher and Consumer are in package
// nsqbridge/bridgemetrics, so that importing this one does not compile
// the bridge and go-nsq in.
//
// The latency and duration histograms have a fixed layout, the same at every scrape
// and on every instance, so rate() over their buckets, histogram_quantile
// and sums across queues and instances work: an upper bound (le) at every
// power of two microseconds from 1 µs to 2^35 µs (about 9.5 hours), then
// +Inf. Each bound is also a bucket bound of spillq's own histogram, so the
// cumulative counts are exact, except that spillq counts a duration of
// exactly a bound's value in the bucket above it. Their _sum is the exact
// sum of the durations recorded, not an estimate from bucket bounds.
package metrics

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/promtable"
)

// Collector is a prometheus.Collector over a queue ([NewQueueCollector]),
// a channel and its disk queue ([NewCollector]), or a topic and its channels
// ([NewTopicCollector]). It reads their Stats at each scrape; it is safe
// for concurrent use.
type Collector struct {
	// One of the two: a queue's parts (either may be nil), or a topic.
	ch    channelSource
	dq    diskSource
	topic *spillq.Topic
	// dead is a queue's dead-letter store (NewQueueCollector; nil
	// without), and deadStored its gauge.
	dead       *spillq.DeadLetters
	deadStored promtable.Table[*spillq.DeadLetters]
	// The descriptions carry the queue's name as a constant label, which is
	// what lets collectors of several queues share a registry: the
	// registry tells collectors apart by name and constant labels. A
	// topic's per-channel ones have a variable "channel" label too.
	chMetrics    promtable.Table[channel.Stats]   // for this queue, or per channel of this topic
	dqMetrics    promtable.Table[diskqueue.Stats] // for this queue or topic
	latency      *prometheus.Desc
	fsyncLatency *prometheus.Desc
	// A topic's only.
	cursorMetrics promtable.Table[spillq.ChannelStats] // per channel
	putMetrics    promtable.Table[spillq.TopicStats]
}

// channelSource is what a collector reads of a channel: a
// *channel.Channel's or a *spillq.Queue's.
type channelSource interface {
	Stats() channel.Stats
	LatencyBuckets() (upper []time.Duration, counts []uint64)
	LatencySumSeconds() float64
}

// syncLatency is a log's fsync histogram.
type syncLatency interface {
	SyncLatencyBuckets() (upper []time.Duration, counts []uint64)
	SyncLatencySumSeconds() float64
}

// diskSource is what a collector reads of a disk log: a *diskqueue.Queue's
// or a spillq.Queue's Disk view.
type diskSource interface {
	Stats() diskqueue.Stats
	syncLatency
}

// NewCollector returns a collector for the queue called name, made of a
// channel and the disk queue under it (either may be nil); name becomes
// the "queue" label of every metric it exports, and must differ between
// collectors registered on one registry. A *spillq.Queue has its own,
// [NewQueueCollector].
func NewCollector(name string, ch *channel.Channel, dq *diskqueue.Queue) *Collector {
	// A nil pointer in an interface is not a nil interface.
	var cs channelSource
	if ch != nil {
		cs = ch
	}
	var ds diskSource
	if dq != nil {
		ds = dq
	}
	return newCollector(name, cs, ds)
}

func newCollector(name string, ch channelSource, dq diskSource) *Collector {
	labels := prometheus.Labels{"queue": name}
	c := &Collector{ch: ch, dq: dq}
	// A "channel" label, always empty (which Prometheus takes for none),
	// as a topic's channels have it filled: a registry holds a name's
	// series with one set of label names, so the two share one.
	c.chMetrics = promtable.New(name, channelMetrics, "channel")
	c.dqMetrics = promtable.New(name, diskMetrics)
	// The empty "channel" label of the other channel series (it had none).
	c.latency = prometheus.NewDesc("spillq_channel_latency_seconds", "End-to-end latency from Put to Finish; under a backlog one finish in 8 is timed and stands for the others.", []string{"channel"}, labels)
	c.fsyncLatency = prometheus.NewDesc("spillq_disk_fsync_duration_seconds", "Duration of fsyncs of the log.", nil, labels)
	return c
}

// NewQueueCollector returns a collector for the queue q called name, which
// becomes the "queue" label of every metric it exports and must differ
// between collectors registered on one registry: the channel metrics
// (spillq_channel_*), its disk log's (spillq_disk_*), and
// spillq_channel_dead_letters_stored, the letters its dead-letter store
// holds (none with Options.DiscardDeadLetters).
func NewQueueCollector(name string, q *spillq.Queue) *Collector {
	c := newCollector(name, q, q.Disk())
	if c.dead = q.DeadLetters(); c.dead != nil {
		c.deadStored = promtable.New(name, queueDeadLetters, "channel")
	}
	return c
}

// NewTopicCollector returns a collector for the topic called name, which
// becomes the "queue" label of every metric it exports, as for
// [NewQueueCollector]. Each channel's series carry a "channel" label too: the
// channel metrics of a queue's for each channel open in this process
// (a channel that is not has no such series), and for every channel, open
// or not, its lag in records and in seconds (spillq_channel_lag_records,
// spillq_channel_lag_seconds), spillq_channel_open, the messages in its
// timer store (spillq_channel_timer_store_records) and the messages it gave
// up to its lag policy (spillq_channel_dropped_total) and the letters in
// its dead-letter store (spillq_channel_dead_letters_stored). The log's
// spillq_disk_* metrics come once, with the queue label only; their
// cursor figures (depth, in flight, read seq) are the channel furthest
// behind's. spillq_topic_* count the topic's Puts (a topic's channel
// counts none of its own: its spillq_channel_puts_total and
// spillq_channel_spills_total stay 0).
//
// The channels' latency histogram is not exported: [spillq.TopicStats]
// has each channel's percentiles, not its histogram.
//
// Queues' and topics' collectors share a registry: a queue's channel
// series have the "channel" label too, empty.
func NewTopicCollector(name string, t *spillq.Topic) *Collector {
	// A queue's channel and disk tables, with neither source: a topic's
	// stats feed them.
	c := newCollector(name, nil, nil)
	c.topic = t
	c.cursorMetrics = promtable.New(name, cursorMetrics, "channel")
	c.putMetrics = promtable.New(name, topicMetrics)
	return c
}

// One table per layer: each metric with the Stats field it reports, so
// Describe and Collect cannot drift apart.
var channelMetrics = []promtable.Spec[channel.Stats]{
	promtable.Gauge("spillq_channel_memory_depth", "Messages in the memory buffer.", func(s channel.Stats) float64 { return float64(s.MemoryDepth) }),
	promtable.Gauge("spillq_channel_memory_capacity", "Size of the memory buffer (MemQueueSize), in messages.", func(s channel.Stats) float64 { return float64(s.MemoryBound) }),
	promtable.Gauge("spillq_channel_disk_depth", "Messages in the backend waiting for delivery.", func(s channel.Stats) float64 { return float64(s.DiskDepth) }),
	promtable.Gauge("spillq_channel_in_flight", "Messages delivered and not yet finished or requeued.", func(s channel.Stats) float64 { return float64(s.InFlight) }),
	promtable.Gauge("spillq_channel_deferred", "Messages waiting for their due time.", func(s channel.Stats) float64 { return float64(s.Deferred) }),
	promtable.Gauge("spillq_channel_ready", "Requeued or timed-out messages waiting for delivery.", func(s channel.Stats) float64 { return float64(s.Ready) }),
	promtable.Counter("spillq_channel_puts_total", "Messages accepted by Put.", func(s channel.Stats) float64 { return float64(s.Puts) }),
	promtable.Counter("spillq_channel_spills_total", "Messages written to the backend by Put.", func(s channel.Stats) float64 { return float64(s.Spills) }),
	promtable.Counter("spillq_channel_requeues_total", "Messages requeued by consumers.", func(s channel.Stats) float64 { return float64(s.Requeues) }),
	promtable.Counter("spillq_channel_timeouts_total", "Deliveries that timed out.", func(s channel.Stats) float64 { return float64(s.Timeouts) }),
	promtable.Counter("spillq_channel_finishes_total", "Messages finished.", func(s channel.Stats) float64 { return float64(s.Finishes) }),
	promtable.Counter("spillq_channel_dead_letters_total", "Messages handed to the dead-letter handler.", func(s channel.Stats) float64 { return float64(s.DeadLetters) }),
	promtable.Counter("spillq_channel_failed_total", "Messages a consumer failed for good (Message.Fail).", func(s channel.Stats) float64 { return float64(s.Failed) }),
	promtable.Counter("spillq_channel_released_total", "Deliveries given back unspent (Message.Release).", func(s channel.Stats) float64 { return float64(s.Released) }),
	promtable.Counter("spillq_channel_dead_letter_errors_total", "Errors of the dead-letter handler (each message it refused kept and tried again).", func(s channel.Stats) float64 { return float64(s.DeadLetterErrors) }),
	promtable.Counter("spillq_channel_expired_total", "Dead letters that expired before delivery.", func(s channel.Stats) float64 { return float64(s.Expired) }),
	promtable.Counter("spillq_channel_bad_records_total", "Backend records that were not channel messages.", func(s channel.Stats) float64 { return float64(s.BadRecords) }),
	promtable.Counter("spillq_channel_read_errors_total", "Backend reads that failed (each tried again 100 ms later); nothing of the backend is delivered while they fail.", func(s channel.Stats) float64 { return float64(s.ReadErrors) }),
	promtable.Gauge("spillq_channel_keys_pending", "Keys with a message pending (KeyUnique, KeyReplace), put within the window (KeyDedup) or being worked on (KeySerial).", func(s channel.Stats) float64 { return float64(s.KeysPending) }),
	promtable.Gauge("spillq_channel_key_waiting", "Messages waiting behind their key's message (KeySerial).", func(s channel.Stats) float64 { return float64(s.KeyWaiting) }),
	promtable.Counter("spillq_channel_duplicates_total", "Puts refused by the key policy (KeyUnique, KeyDedup).", func(s channel.Stats) float64 { return float64(s.Duplicates) }),
	promtable.Counter("spillq_channel_superseded_total", "Messages replaced by a newer one with their key before delivery (KeyReplace).", func(s channel.Stats) float64 { return float64(s.Superseded) }),
}

var diskMetrics = []promtable.Spec[diskqueue.Stats]{
	promtable.Gauge("spillq_disk_depth", "Records on disk not yet acknowledged.", func(s diskqueue.Stats) float64 { return float64(s.Depth) }),
	promtable.Gauge("spillq_disk_in_flight", "Records read and not yet acknowledged.", func(s diskqueue.Stats) float64 { return float64(s.InFlight) }),
	promtable.Gauge("spillq_disk_bytes", "Bytes of log, index and time-index files.", func(s diskqueue.Stats) float64 { return float64(s.DiskBytes) }),
	promtable.Gauge("spillq_disk_segments", "Segment files on disk.", func(s diskqueue.Stats) float64 { return float64(s.Segments) }),
	promtable.Gauge("spillq_disk_first_seq", "Oldest record still on disk.", func(s diskqueue.Stats) float64 { return float64(s.FirstSeq) }),
	promtable.Gauge("spillq_disk_read_seq", "Read cursor: oldest record not acknowledged.", func(s diskqueue.Stats) float64 { return float64(s.ReadSeq) }),
	promtable.Gauge("spillq_disk_write_seq", "Write cursor: the seq the next Put gets.", func(s diskqueue.Stats) float64 { return float64(s.WriteSeq) }),
	promtable.Counter("spillq_disk_puts_total", "Records accepted by Put since the queue was opened.", func(s diskqueue.Stats) float64 { return float64(s.Puts) }),
	promtable.Counter("spillq_disk_acks_total", "Records acknowledged since the queue was opened.", func(s diskqueue.Stats) float64 { return float64(s.Acks) }),
	promtable.Counter("spillq_disk_syncs_total", "fsyncs of the log since the queue was opened.", func(s diskqueue.Stats) float64 { return float64(s.Syncs) }),
	promtable.Counter("spillq_disk_corrupt_records_total", "Records skipped because their bytes failed a check.", func(s diskqueue.Stats) float64 { return float64(s.CorruptRecords) }),
	promtable.Counter("spillq_disk_bad_files_total", "Quarantine (.bad) files written since the queue was opened.", func(s diskqueue.Stats) float64 { return float64(s.BadFiles) }),
	promtable.Counter("spillq_disk_index_rebuilds_total", "Index files rebuilt from their log.", func(s diskqueue.Stats) float64 { return float64(s.IndexRebuilds) }),
	promtable.Counter("spillq_disk_read_errors_total", "I/O errors returned by reads (not corruption).", func(s diskqueue.Stats) float64 { return float64(s.ReadErrors) }),
	promtable.Counter("spillq_disk_retried_writes_total", "Batches written again after the disk was full.", func(s diskqueue.Stats) float64 { return float64(s.RetriedWrites) }),
	promtable.Counter("spillq_disk_compacted_records_total", "Records compaction removed from sealed segments since the queue was opened.", func(s diskqueue.Stats) float64 { return float64(s.CompactedRecords) }),
	promtable.Counter("spillq_disk_compacted_bytes_total", "Log bytes compaction freed since the queue was opened.", func(s diskqueue.Stats) float64 { return float64(s.CompactedBytes) }),
}

// cursorMetrics are a topic's, per channel: its place in the log.
var cursorMetrics = []promtable.Spec[spillq.ChannelStats]{
	promtable.Gauge("spillq_channel_lag_records", "Records of the topic's log the channel has not finished, in flight ones included.", func(s spillq.ChannelStats) float64 { return float64(s.Cursor.Depth) }),
	promtable.Gauge("spillq_channel_lag_seconds", "Age of the oldest record of the topic's log the channel has not finished; 0 when none.", func(s spillq.ChannelStats) float64 { return s.Lag.Seconds() }),
	promtable.Gauge("spillq_channel_open", "1 if the channel is open in this process, 0 if it only keeps its place in the log.", func(s spillq.ChannelStats) float64 { return bool01(s.Open) }),
	promtable.Gauge("spillq_channel_timer_store_records", "Messages the channel keeps in its timer store: deferred, and what it held at its last Close.", func(s spillq.ChannelStats) float64 { return float64(s.Timers) }),
	promtable.Counter("spillq_channel_dropped_total", "Messages of the topic's log the channel gave up at MaxDiskBytes (ChannelOptions.DropWhenFull) since the topic opened.", func(s spillq.ChannelStats) float64 { return float64(s.Cursor.Dropped) }),
	promtable.Gauge(deadLettersStored, deadLettersStoredHelp, func(s spillq.ChannelStats) float64 { return float64(s.DeadLetters) }),
}

// deadLettersStored is a queue's (NewQueueCollector) and each topic
// channel's: the letters its dead-letter store holds.
const (
	deadLettersStored     = "spillq_channel_dead_letters_stored"
	deadLettersStoredHelp = "Dead letters the channel's dead-letter store holds (listed, redriven and purged with spillq dead)."
)

// queueDeadLetters is a queue's deadLettersStored, read from its store.
var queueDeadLetters = []promtable.Spec[*spillq.DeadLetters]{
	promtable.Gauge(deadLettersStored, deadLettersStoredHelp, func(d *spillq.DeadLetters) float64 { return float64(d.Len()) }),
}

// topicMetrics are a topic's, once: its Puts.
var topicMetrics = []promtable.Spec[spillq.TopicStats]{
	promtable.Counter("spillq_topic_puts_total", "Messages accepted by the topic's Put, each for every channel.", func(s spillq.TopicStats) float64 { return float64(s.Puts) }),
	promtable.Counter("spillq_topic_memory_puts_total", "Of those, handed to the channels' memory buffers and not written to the log.", func(s spillq.TopicStats) float64 { return float64(s.ToMemory) }),
	promtable.Counter("spillq_topic_log_puts_total", "Of those, written to the log.", func(s spillq.TopicStats) float64 { return float64(s.ToLog) }),
	promtable.Counter("spillq_topic_put_failures_total", "Messages the log or the key policy refused.", func(s spillq.TopicStats) float64 { return float64(s.PutFailures) }),
	promtable.Gauge("spillq_topic_keys_pending", "Keys the topic's key policy holds (TopicOptions.Keys).", func(s spillq.TopicStats) float64 { return float64(s.KeysPending) }),
	promtable.Counter("spillq_topic_duplicates_total", "Puts the topic's key policy refused as duplicates.", func(s spillq.TopicStats) float64 { return float64(s.Duplicates) }),
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Describe sends every metric's description.
func (c *Collector) Describe(out chan<- *prometheus.Desc) {
	if c.topic != nil {
		c.putMetrics.Describe(out)
		c.chMetrics.Describe(out)
		c.cursorMetrics.Describe(out)
		c.dqMetrics.Describe(out)
		out <- c.fsyncLatency
		return
	}
	if c.ch != nil {
		c.chMetrics.Describe(out)
		out <- c.latency
	}
	if c.dead != nil {
		c.deadStored.Describe(out)
	}
	if c.dq != nil {
		c.dqMetrics.Describe(out)
		out <- c.fsyncLatency
	}
}

// Collect reads the queue's or topic's Stats and sends them.
func (c *Collector) Collect(out chan<- prometheus.Metric) {
	if c.topic != nil {
		c.collectTopic(out)
		return
	}
	if c.ch != nil {
		c.chMetrics.Collect(out, c.ch.Stats(), "") // a queue's: its "channel" label empty
		upper, counts := c.ch.LatencyBuckets()
		out <- constHistogram(c.latency, upper, counts, c.ch.LatencySumSeconds(), "")
	}
	if c.dead != nil {
		c.deadStored.Collect(out, c.dead, "")
	}
	if c.dq != nil {
		c.collectDisk(out, c.dq.Stats(), c.dq)
	}
}

// collectTopic sends one snapshot of the topic: its Puts, each channel's
// series, and its log's.
func (c *Collector) collectTopic(out chan<- prometheus.Metric) {
	st := c.topic.Stats()
	c.putMetrics.Collect(out, st)
	for _, cs := range st.Channels {
		c.cursorMetrics.Collect(out, cs, cs.Name)
		if cs.Open {
			c.chMetrics.Collect(out, cs.Channel, cs.Name)
		}
	}
	c.collectDisk(out, st.Log, c.topic.Log())
}

// collectDisk sends a log's series: st, and l's fsync histogram.
func (c *Collector) collectDisk(out chan<- prometheus.Metric, st diskqueue.Stats, l syncLatency) {
	c.dqMetrics.Collect(out, st)
	upper, counts := l.SyncLatencyBuckets()
	out <- constHistogram(c.fsyncLatency, upper, counts, l.SyncLatencySumSeconds())
}

// bounds are the exported histograms' upper bounds: every power of two
// microseconds from 1 µs to 2^35 µs. Powers of two are bucket bounds of
// spillq's histogram (four buckets per power of two from 4 µs, one per
// microsecond below), so each spillq bucket falls wholly under one bound.
var bounds = func() []time.Duration {
	b := make([]time.Duration, 36)
	for i := range b {
		b[i] = time.Microsecond << i
	}
	return b
}()

// constHistogram folds spillq's bucket snapshot (the exclusive upper bound of
// each non-empty bucket and its count, bounds increasing) into the fixed
// layout of bounds. A bucket [lower, upper) goes under the first bound at or
// above upper: every duration in it is below that bound. Durations past the
// last bound are counted in +Inf (the total) only.
func constHistogram(desc *prometheus.Desc, upper []time.Duration, counts []uint64, sum float64, labelValues ...string) prometheus.Metric {
	perBound := make([]uint64, len(bounds))
	var total uint64
	for i, u := range upper {
		total += counts[i]
		if j := sort.Search(len(bounds), func(j int) bool { return bounds[j] >= u }); j < len(bounds) {
			perBound[j] += counts[i]
		}
	}
	buckets := make(map[float64]uint64, len(bounds))
	var cumulative uint64
	for j, b := range bounds {
		cumulative += perBound[j]
		buckets[b.Seconds()] = cumulative
	}
	return prometheus.MustNewConstHistogram(desc, total, sum, buckets, labelValues...)
}
