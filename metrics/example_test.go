package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/metrics"
)

// A service with two queues registers one collector for each on one
// registry and serves it; every series carries its queue's name.
func ExampleNewQueueCollector() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	jobs, err := spillq.Open(filepath.Join(dir, "jobs"), spillq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer jobs.Close()
	emails, err := spillq.Open(filepath.Join(dir, "emails"), spillq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emails.Close()
	ctx := context.Background()
	jobs.Put(ctx, []byte("resize image 1"))
	jobs.Put(ctx, []byte("resize image 2"))
	emails.Put(ctx, []byte("welcome mail"))

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewQueueCollector("jobs", jobs),
		metrics.NewQueueCollector("emails", emails),
	)
	// In a service: http.Handle("/metrics", promhttp.HandlerFor(reg, ...)).
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "spillq_channel_puts_total") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// spillq_channel_puts_total{channel="",queue="emails"} 1
	// spillq_channel_puts_total{channel="",queue="jobs"} 2
}

// A topic's collector exports each channel's series with a "channel"
// label: here billing has finished every message and analytics, slower,
// is 2 behind.
func ExampleNewTopicCollector() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	events, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer events.Close()
	billing, err := events.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		log.Fatal(err)
	}
	analytics, err := events.Channel("analytics", spillq.ChannelOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range []string{"order 1", "order 2", "order 3"} {
		if err := events.Put(ctx, []byte(e)); err != nil {
			log.Fatal(err)
		}
	}
	for ch, n := range map[*spillq.Channel]int{billing: 3, analytics: 1} {
		for range n {
			m, err := ch.Receive(ctx)
			if err != nil {
				log.Fatal(err)
			}
			m.Finish()
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewTopicCollector("events", events))
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "spillq_channel_lag_records" || mf.GetName() == "spillq_disk_write_seq" {
			for _, m := range mf.GetMetric() {
				fmt.Println(mf.GetName(), labels(m.GetLabel()), m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// spillq_channel_lag_records channel=analytics queue=events 2
	// spillq_channel_lag_records channel=billing queue=events 0
	// spillq_disk_write_seq queue=events 3
}

func labels(pairs []*dto.LabelPair) string {
	var s []string
	for _, p := range pairs {
		s = append(s, p.GetName()+"="+p.GetValue())
	}
	return strings.Join(s, " ")
}
