package bridgemetrics_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillq/spillq/nsqbridge"
	"github.com/spillq/spillq/nsqbridge/bridgemetrics"
)

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestBridgeCollectors: a publisher whose nsqd is unreachable keeps its
// messages pending and counts the refused one; two publishers and a
// consumer share one registry.
func TestBridgeCollectors(t *testing.T) {
	addr := deadAddr(t)
	open := func() *nsqbridge.Publisher {
		p, err := nsqbridge.OpenPublisher(t.TempDir(), nsqbridge.PublisherOptions{NSQD: []string{addr}, Topic: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	orders, audit := open(), open()
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := orders.Publish(ctx, []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	if err := orders.Publish(ctx, nil); !errors.Is(err, nsqbridge.ErrEmptyMessage) {
		t.Fatal(err)
	}
	c, err := nsqbridge.NewConsumer(nsqbridge.ConsumerOptions{Topic: "jobs", Channel: "w", Lookupd: []string{deadAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(bridgemetrics.NewPublisherCollector("orders", orders), bridgemetrics.NewPublisherCollector("audit", audit),
		bridgemetrics.NewConsumerCollector("workers", c))
	want := `
# HELP spillq_nsqbridge_publisher_pending Messages in the local queue not yet acknowledged by nsqd.
# TYPE spillq_nsqbridge_publisher_pending gauge
spillq_nsqbridge_publisher_pending{queue="audit"} 0
spillq_nsqbridge_publisher_pending{queue="orders"} 3
# HELP spillq_nsqbridge_publisher_published_total Messages accepted by Publish, PublishTo and DeferredPublish since the publisher opened.
# TYPE spillq_nsqbridge_publisher_published_total counter
spillq_nsqbridge_publisher_published_total{queue="audit"} 0
spillq_nsqbridge_publisher_published_total{queue="orders"} 3
# HELP spillq_nsqbridge_publisher_nodes nsqd nodes known (configured or discovered).
# TYPE spillq_nsqbridge_publisher_nodes gauge
spillq_nsqbridge_publisher_nodes{queue="audit"} 1
spillq_nsqbridge_publisher_nodes{queue="orders"} 1
# HELP spillq_nsqbridge_consumer_in_flight Messages received and not yet answered.
# TYPE spillq_nsqbridge_consumer_in_flight gauge
spillq_nsqbridge_consumer_in_flight{queue="workers"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"spillq_nsqbridge_publisher_pending", "spillq_nsqbridge_publisher_published_total",
		"spillq_nsqbridge_publisher_nodes", "spillq_nsqbridge_consumer_in_flight"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "spillq_nsqbridge_publisher_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var queue, kind string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "queue":
					queue = l.GetValue()
				case "kind":
					kind = l.GetValue()
				}
			}
			if queue == "orders" && kind == "invalid" {
				found = true
				if v := m.GetCounter().GetValue(); v != 1 {
					t.Fatalf("invalid errors %v, want 1", v)
				}
			}
		}
	}
	if !found {
		t.Fatal("no errors_total{kind=invalid} for orders")
	}
	for _, col := range []prometheus.Collector{bridgemetrics.NewPublisherCollector("orders", orders), bridgemetrics.NewConsumerCollector("workers", c)} {
		problems, err := testutil.CollectAndLint(col)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}
