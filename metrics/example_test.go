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

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/metrics"
)

// A service with two queues registers one collector for each on one
// registry and serves it; every series carries its queue's name.
func ExampleNewCollector() {
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
		metrics.NewCollector("jobs", jobs.Channel, jobs.Disk()),
		metrics.NewCollector("emails", emails.Channel, emails.Disk()),
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
	// spillq_channel_puts_total{queue="emails"} 1
	// spillq_channel_puts_total{queue="jobs"} 2
}
