package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/metrics"
)

// TestDeadLettersStored: a queue's collector (NewQueueCollector) and a
// topic's report the letters each dead-letter store holds, a topic's
// channel's whether it is open or not.
func TestDeadLettersStored(t *testing.T) {
	ctx := context.Background()
	q, err := spillq.Open(t.TempDir(), spillq.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	tp, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	a, err := tp.Channel("a", spillq.ChannelOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Channel("b", spillq.ChannelOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		q.Put(ctx, []byte("job"))
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Fail(nil)
	}
	tp.Put(ctx, []byte("event"))
	m, err := a.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Fail(nil)
	a.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewQueueCollector("jobs", q), metrics.NewTopicCollector("events", tp))
	want := `
# HELP spillq_channel_dead_letters_stored Dead letters the channel's dead-letter store holds (listed, redriven and purged with spillq dead).
# TYPE spillq_channel_dead_letters_stored gauge
spillq_channel_dead_letters_stored{channel="",queue="jobs"} 2
spillq_channel_dead_letters_stored{channel="a",queue="events"} 1
spillq_channel_dead_letters_stored{channel="b",queue="events"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillq_channel_dead_letters_stored"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(metrics.NewQueueCollector("jobs", q)); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
