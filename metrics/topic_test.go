package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/metrics"
)

// topicWorkload opens a topic with three channels and puts 10 messages:
// billing finishes all of them, analytics 4, and audit is closed.
func topicWorkload(t *testing.T) *spillq.Topic {
	t.Helper()
	tp, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	open := func(name string) *spillq.Channel {
		ch, err := tp.Channel(name, spillq.ChannelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	billing, analytics, audit := open("billing"), open("analytics"), open("audit")
	if err := audit.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if err := tp.Put(ctx, []byte("event")); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(ch *spillq.Channel, n int) {
		for range n {
			m, err := ch.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	}
	finish(billing, 10)
	finish(analytics, 4)
	return tp
}

// TestTopicCollectorValues: each channel's series carry its name, the
// log's come once per topic, and a closed channel has its lag only.
func TestTopicCollectorValues(t *testing.T) {
	tp := topicWorkload(t)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(metrics.NewTopicCollector("events", tp)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP spillq_channel_finishes_total Messages finished.
# TYPE spillq_channel_finishes_total counter
spillq_channel_finishes_total{channel="analytics",queue="events"} 4
spillq_channel_finishes_total{channel="billing",queue="events"} 10
# HELP spillq_channel_lag_records Records of the topic's log the channel has not finished, in flight ones included.
# TYPE spillq_channel_lag_records gauge
spillq_channel_lag_records{channel="analytics",queue="events"} 6
spillq_channel_lag_records{channel="audit",queue="events"} 10
spillq_channel_lag_records{channel="billing",queue="events"} 0
# HELP spillq_channel_open 1 if the channel is open in this process, 0 if it only keeps its place in the log.
# TYPE spillq_channel_open gauge
spillq_channel_open{channel="analytics",queue="events"} 1
spillq_channel_open{channel="audit",queue="events"} 0
spillq_channel_open{channel="billing",queue="events"} 1
# HELP spillq_channel_dropped_total Messages of the topic's log the channel gave up at MaxDiskBytes (ChannelOptions.DropWhenFull) since the topic opened.
# TYPE spillq_channel_dropped_total counter
spillq_channel_dropped_total{channel="analytics",queue="events"} 0
spillq_channel_dropped_total{channel="audit",queue="events"} 0
spillq_channel_dropped_total{channel="billing",queue="events"} 0
# HELP spillq_disk_write_seq Write cursor: the seq the next Put gets.
# TYPE spillq_disk_write_seq gauge
spillq_disk_write_seq{queue="events"} 10
# HELP spillq_disk_depth Records on disk not yet acknowledged.
# TYPE spillq_disk_depth gauge
spillq_disk_depth{queue="events"} 10
# HELP spillq_topic_puts_total Messages accepted by the topic's Put, each for every channel.
# TYPE spillq_topic_puts_total counter
spillq_topic_puts_total{queue="events"} 10
# HELP spillq_topic_log_puts_total Of those, written to the log.
# TYPE spillq_topic_log_puts_total counter
spillq_topic_log_puts_total{queue="events"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"spillq_channel_finishes_total", "spillq_channel_lag_records", "spillq_channel_open", "spillq_channel_dropped_total",
		"spillq_disk_write_seq", "spillq_disk_depth", "spillq_topic_puts_total", "spillq_topic_log_puts_total"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sawLag := false
	for _, mf := range mfs {
		name, series := mf.GetName(), mf.GetMetric()
		switch {
		case name == "spillq_channel_lag_seconds":
			sawLag = true
			for _, m := range series {
				channel, lag := m.GetLabel()[0].GetValue(), m.GetGauge().GetValue()
				if behind := channel != "billing"; behind != (lag > 0) {
					t.Errorf("lag of %s: %vs", channel, lag)
				}
			}
		case name == "spillq_channel_lag_records" || name == "spillq_channel_open" || name == "spillq_channel_dropped_total" || name == "spillq_channel_timer_store_records" || name == "spillq_channel_dead_letters_stored":
		case strings.HasPrefix(name, "spillq_channel_"):
			// A queue's channel metrics, for each open channel.
			if len(series) != 2 {
				t.Errorf("%s: %d series, want one per open channel", name, len(series))
			}
		default: // spillq_disk_* and spillq_topic_*
			if len(series) != 1 || len(series[0].GetLabel()) != 1 {
				t.Errorf("%s: %d series, want one with the queue label only", name, len(series))
			}
		}
	}
	if !sawLag {
		t.Errorf("the gather lacks spillq_channel_lag_seconds")
	}
}

func TestTopicMetricNamesFollowConventions(t *testing.T) {
	problems, err := testutil.CollectAndLint(metrics.NewTopicCollector("events", topicWorkload(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestTopicAndQueueRegistries: two topics and a queue share a registry
// (a queue's channel series carry an empty "channel" label, so each name
// has one set of label names).
func TestTopicAndQueueRegistries(t *testing.T) {
	a, b, q := topicWorkload(t), topicWorkload(t), workload(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewTopicCollector("a", a), metrics.NewTopicCollector("b", b))
	if err := reg.Register(metrics.NewQueueCollector("jobs", q)); err != nil {
		t.Fatalf("a queue's collector beside topics': %v", err)
	}
	want := `
# HELP spillq_channel_finishes_total Messages finished.
# TYPE spillq_channel_finishes_total counter
spillq_channel_finishes_total{channel="analytics",queue="a"} 4
spillq_channel_finishes_total{channel="analytics",queue="b"} 4
spillq_channel_finishes_total{channel="billing",queue="a"} 10
spillq_channel_finishes_total{channel="billing",queue="b"} 10
spillq_channel_finishes_total{channel="",queue="jobs"} 12
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillq_channel_finishes_total"); err != nil {
		t.Fatal(err)
	}
}

// TestTopicKeyMetrics: a topic's key policy shows in spillq_topic_*.
func TestTopicKeyMetrics(t *testing.T) {
	tp, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{Keys: channel.KeyUnique})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if _, err := tp.Channel("a", spillq.ChannelOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		tp.PutWith(ctx, []byte("job"), channel.PutOptions{Key: []byte("k")}) // the second and third are duplicates
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewTopicCollector("jobs", tp))
	want := `
# HELP spillq_topic_duplicates_total Puts the topic's key policy refused as duplicates.
# TYPE spillq_topic_duplicates_total counter
spillq_topic_duplicates_total{queue="jobs"} 2
# HELP spillq_topic_keys_pending Keys the topic's key policy holds (TopicOptions.Keys).
# TYPE spillq_topic_keys_pending gauge
spillq_topic_keys_pending{queue="jobs"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillq_topic_duplicates_total", "spillq_topic_keys_pending"); err != nil {
		t.Fatal(err)
	}
}
