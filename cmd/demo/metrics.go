package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spillq/spillq/nsqhttp"
)

// serveMetrics serves c's metrics (the queue's or the topic's) at
// http://addr/metrics until the returned function is called. It prints the
// address it listens on, which matters when addr asks for any free port
// (":0").
func serveMetrics(addr string, c prometheus.Collector, out io.Writer) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return serve("metrics", addr, func(a net.Addr) string { return "http://" + a.String() + "/metrics" }, mux, out)
}

// serveNSQ serves nsqd's HTTP API over the demo's queue or topic (package
// nsqhttp) on addr, for nsqadmin --nsqd-http-address, with /healthz and
// /readyz, until the returned function is called.
func serveNSQ(addr string, opts nsqhttp.Options, out io.Writer) (func(), error) {
	h, err := nsqhttp.New(opts)
	if err != nil {
		return nil, err
	}
	return serve("nsqd http api", addr, func(a net.Addr) string {
		return fmt.Sprintf("http://%s/stats?format=json (nsqadmin --nsqd-http-address=%s)", a, a)
	}, h, out)
}

// serve serves h on addr, printing what and where (says, given the address
// it listens on); the address printed matters when addr asks for any free
// port (":0").
func serve(what, addr string, where func(net.Addr) string, h http.Handler, out io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	fmt.Fprintf(out, "%s: %s\n", what, where(ln.Addr()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}
