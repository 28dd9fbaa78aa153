// Command demo shows spillq at work: producers that outpace their consumers
// for a few seconds, so the memory buffer fills and messages spill to disk,
// then consumers that catch up and drain both. A live view shows the rates,
// the memory buffer against its bound, and the disk backlog.
//
//	go run ./cmd/demo                      # about 10 seconds, in a temp dir
//	go run ./cmd/demo -dir /tmp/q -crash-after 3s   # killed with SIGKILL...
//	go run ./cmd/demo -dir /tmp/q          # ...and what the rerun recovers
//	go run ./cmd/demo -topic               # one topic, two channels at their own speeds
//	go run ./cmd/demo -nsqd-http-address 127.0.0.1:4151 -duration 5m   # watch it in nsqadmin
//
// Ctrl-C (SIGINT) or SIGTERM stops it gracefully: producers and consumers
// stop, Close writes what is still in memory or in flight to disk, and a
// rerun with the same -dir delivers it. A second signal exits at once.
//
// It ends with a summary line a script can parse:
//
//	summary produced=N finished=N spilled=N redelivered=N duplicates=N waiting=N lost=N
//
// With -topic the producers put to a topic (spillq.OpenTopic) that two
// channels read, each with -consumers consumers: billing at -work a
// message, analytics at twice that. The view shows, per channel, its
// depth (records of the log it has not finished) and lag (the age of the
// oldest of them): billing keeps up, analytics falls behind and catches up
// once the producers stop. It ends with
//
//	summary topic produced=N billing=N analytics=N duplicates=N waiting=N lost=N
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/metrics"
	"github.com/spillq/spillq/nsqhttp"
)

type config struct {
	dir        string
	producers  int
	consumers  int
	rate       int
	size       int
	work       time.Duration
	mem        int
	duration   time.Duration
	sync       string
	compress   bool
	fail       float64
	crashAfter time.Duration
	plain      bool
	metrics    string
	nsqd       string
	topic      bool
}

func main() {
	var c config
	flag.StringVar(&c.dir, "dir", "", "queue directory, kept afterwards (default: a temporary one, removed)")
	flag.IntVar(&c.producers, "producers", 2, "producer goroutines")
	flag.IntVar(&c.consumers, "consumers", 4, "consumer goroutines")
	flag.IntVar(&c.rate, "rate", 12500, "messages per second per producer (0: as fast as possible)")
	flag.IntVar(&c.size, "size", 100, "message body size in bytes")
	flag.DurationVar(&c.work, "work", 400*time.Microsecond, "processing time per message")
	flag.IntVar(&c.mem, "mem", 10000, "memory buffer size in messages (MemQueueSize; 0: everything through disk)")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "about how long the run takes: producing for 40% of it, then draining")
	flag.StringVar(&c.sync, "sync", "batch", "disk sync policy: always (fsync per Put, group commit), batch (every 2500 records or 2 s), none")
	flag.BoolVar(&c.compress, "compress", false, "snappy-compress bodies spilled to disk")
	flag.Float64Var(&c.fail, "fail", 0.02, "share of deliveries that fail and are requeued with a delay")
	flag.DurationVar(&c.crashAfter, "crash-after", 0, "kill this process with SIGKILL after this long; run again with the same -dir to see the recovery")
	flag.BoolVar(&c.plain, "plain", false, "print one plain line a second even on a terminal")
	flag.StringVar(&c.metrics, "metrics-addr", "", "serve Prometheus metrics on this address (such as 127.0.0.1:9090) at /metrics")
	flag.StringVar(&c.nsqd, "nsqd-http-address", "", "serve nsqd's HTTP API (package nsqhttp) on this address (such as 127.0.0.1:4151), for nsqadmin --nsqd-http-address, with /healthz and /readyz")
	flag.BoolVar(&c.topic, "topic", false, "put to a topic read by two channels, billing and analytics (twice as slow), instead of a queue")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// The first signal asked for a graceful stop, which may take a
		// moment (Close writes the memory buffer to disk). A second one is
		// someone who will not wait: leave now, as a kill would, but with
		// the cursor the live view hid.
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		stop()
		<-again
		if term.IsTerminal(int(os.Stdout.Fd())) {
			os.Stdout.WriteString(showCursor)
		}
		fmt.Fprintln(os.Stderr, "\ndemo: second signal: exiting without closing the queue")
		os.Exit(130)
	}()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	switch {
	case c.producers < 1 || c.consumers < 1:
		return errors.New("-producers and -consumers must be at least 1")
	case c.rate < 0 || c.size < 0 || c.mem < 0 || c.work < 0:
		return errors.New("-rate, -size, -mem and -work must not be negative")
	case c.duration <= 0:
		return errors.New("-duration must be positive")
	case c.fail < 0 || c.fail >= 1:
		return errors.New("-fail must be in [0, 1)")
	case c.topic && c.crashAfter > 0:
		return errors.New("-crash-after is for the queue demo, whose ledger tells what a crash lost; not with -topic")
	}
	switch c.sync {
	case "always", "batch", "none":
	default:
		return fmt.Errorf("-sync %q: want always, batch or none", c.sync)
	}
	return nil
}

// demo is one run's state.
type demo struct {
	cfg    config
	q      *spillq.Queue
	ledger *ledger

	produced, finished, requeued, redelivered, duplicates atomic.Int64
	recovered                                             int64
	// stopped is set when a signal asked for a graceful stop: what is not
	// finished then stays in the queue, waiting, rather than lost.
	stopped atomic.Bool

	mu          sync.Mutex
	doneSet     map[int64]bool // message numbers finished, this run and before
	producedSet map[int64]bool // message numbers whose Put returned nil, this run
}

// runSpan is how many message numbers each run may use.
const runSpan = 1_000_000_000

func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	dir := cfg.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "spillq-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Small segments, so the view shows disk space freed as consumers drain.
	disk := diskqueue.Options{Compress: cfg.compress, MaxSegmentBytes: 4 << 20}
	switch cfg.sync {
	case "always":
		disk.SyncEvery = 1
	case "none":
		disk.NoSync = true
	}
	if cfg.topic {
		return runTopic(ctx, cfg, dir, disk, out)
	}
	led, past, err := openLedger(filepath.Join(dir, "demo-ledger"))
	if err != nil {
		return err
	}
	defer led.close()
	q, err := spillq.Open(filepath.Join(dir, "queue"), spillq.Options{MemQueueSize: cfg.mem, Disk: disk, MsgTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	d := &demo{cfg: cfg, q: q, ledger: led, doneSet: past.finished, producedSet: map[int64]bool{}}
	// Each run numbers its messages from its own billion, so numbers put by
	// a killed run that its ledger never recorded cannot collide.
	first := (past.maxProduced/runSpan + 1) * runSpan
	// Deferred ones (requeued with a delay) wait on disk too, in the
	// timer store.
	d.recovered = q.Depth() + int64(q.Stats().Deferred)
	if cfg.metrics != "" {
		stopMetrics, err := serveMetrics(cfg.metrics, metrics.NewQueueCollector("demo", q), out)
		if err != nil {
			q.Close()
			return err
		}
		defer stopMetrics()
	}
	if cfg.nsqd != "" {
		queues := map[string]*spillq.Queue{"demo": q}
		stop, err := serveNSQ(cfg.nsqd, nsqhttp.Options{Queues: queues, Health: nsqhttp.Check(queues, nil, spillq.HealthOptions{MaxLag: 5 * time.Second})}, out)
		if err != nil {
			q.Close()
			return err
		}
		defer stop()
	}
	if past.count > 0 {
		fmt.Fprintf(out, "recovered from %s: %d messages waiting on disk; earlier runs produced %d and finished %d\n",
			dir, d.recovered, past.count, len(past.finished))
	}
	start := time.Now()
	produceFor := cfg.duration * 4 / 10
	v := newView(out, cfg, d, start, produceFor)
	var crash *time.Timer
	if cfg.crashAfter > 0 {
		crash = time.AfterFunc(cfg.crashAfter, func() {
			v.restore()
			fmt.Fprintf(out, "\ncrash: SIGKILL after %v; run again with -dir %s\n", cfg.crashAfter, dir)
			// Holding the ledger while flushing and dying: no consumer can
			// finish a message the flushed ledger does not show.
			if err := led.crash(); err != nil {
				fmt.Fprintln(os.Stderr, "demo:", err)
				os.Exit(1)
			}
		})
	}

	runErr := drive(ctx, cfg, d, first, v.draw, v.interval(), produceFor)
	if crash != nil {
		// The kill is for the run; one that fired now would land in the
		// middle of a graceful stop's Close.
		crash.Stop()
	}
	closeErr := q.Close()
	led.flush()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return closeErr
	}
	return d.summary(out, past, dir, cfg.dir == "")
}

// put, and the methods below, make the demo a workload for drive.
func (d *demo) put(ctx context.Context, n int64, b []byte) error {
	if err := d.q.Put(ctx, b); err != nil {
		return err
	}
	d.produced.Add(1)
	d.mu.Lock()
	d.producedSet[n] = true
	d.mu.Unlock()
	d.ledger.record('p', n)
	return nil
}

func (d *demo) consumers() []consumer {
	c := consumer{ch: d.q, work: d.cfg.work, fail: d.cfg.fail, requeued: &d.requeued, redelivered: &d.redelivered,
		// Into the ledger before Finish: a crash between the two then
		// shows as a message delivered again, never as one lost.
		finishing: func(n int64) { d.ledger.record('f', n) },
		finished: func(n int64) {
			d.mu.Lock()
			if d.doneSet[n] {
				d.duplicates.Add(1)
			}
			d.doneSet[n] = true
			d.mu.Unlock()
			d.finished.Add(1)
		},
	}
	cons := make([]consumer, d.cfg.consumers)
	for i := range cons {
		cons[i] = c
	}
	return cons
}

func (d *demo) progress() int64 { return d.finished.Load() }
func (d *demo) backlog() int64  { return d.q.Depth() }
func (d *demo) stop()           { d.stopped.Store(true) }

func (d *demo) drained() bool {
	st := d.q.Stats()
	return d.q.Depth() == 0 && st.InFlight == 0 && st.Deferred == 0
}

// summary prints the summary line and notes. dir is the run's directory;
// temporary says it is removed on exit.
func (d *demo) summary(out io.Writer, past pastRun, dir string, temporary bool) error {
	// Unfinished: produced (this run or before, as the ledger knows) and
	// never finished. After a graceful stop they are waiting in the queue,
	// which Close has written to disk; after a full drain, none can be
	// left there, so any unfinished message is lost.
	d.mu.Lock()
	unfinished := 0
	for n := range past.produced {
		if !d.doneSet[n] {
			unfinished++
		}
	}
	for n := range d.producedSet {
		if !d.doneSet[n] {
			unfinished++
		}
	}
	d.mu.Unlock()
	waiting, lost := 0, unfinished
	if d.stopped.Load() {
		waiting, lost = unfinished, 0
	}
	st := d.q.Stats()
	fmt.Fprintf(out, "summary produced=%d finished=%d spilled=%d redelivered=%d duplicates=%d waiting=%d lost=%d\n",
		d.produced.Load(), d.finished.Load(), st.Spills, d.redelivered.Load(), d.duplicates.Load(), waiting, lost)
	if dup := d.duplicates.Load(); dup > 0 {
		fmt.Fprintf(out, "note: %d messages were recorded finished before a crash and delivered again: the demo writes its ledger before it finishes a message, so a kill between the two leaves one unfinished (delivery is at-least-once)\n", dup)
	}
	if waiting > 0 {
		if temporary {
			fmt.Fprintf(out, "note: stopped by a signal; %d messages not finished were written to disk by Close, in a temporary directory now removed: run with -dir DIR to keep them for a rerun\n", waiting)
		} else {
			fmt.Fprintf(out, "note: stopped by a signal; %d messages not finished are on disk in %s: run again with -dir %s to deliver them (that run counts any that do not come back as lost)\n", waiting, dir, dir)
		}
	}
	if lost > 0 {
		// A kill takes the memory buffer and what was delivered from it;
		// the sync policy decides only what a power cut may take.
		why := fmt.Sprintf("they were in the memory buffer (-mem %d), or in flight after being delivered from it, when the process was killed", d.cfg.mem)
		if d.cfg.mem == 0 {
			why = "with -mem 0 a kill may lose nothing a Put returned for, under every -sync policy: this is a bug, please report it"
		}
		fmt.Fprintf(out, "note: %d messages were lost: %s. Run with -mem 0 for every Put to be in the kernel before it returns (and -sync always, on disk).\n", lost, why)
	}
	return nil
}
