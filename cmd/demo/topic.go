package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/metrics"
	"github.com/spillq/spillq/nsqhttp"
)

// analyticsSlowdown is how many times -work the analytics channel's
// consumers spend on a message: billing keeps up with the producers
// nearly as the queue demo's consumers do, analytics falls behind, and the
// log keeps every record until both have finished it.
const analyticsSlowdown = 2

// topicDemo is a -topic run: the producers put to one topic, whose log
// two channels read, each with -consumers consumers of its own.
type topicDemo struct {
	cfg    config
	topic  *spillq.Topic
	groups []*consumerGroup
	view   *view

	produced, requeued, redelivered atomic.Int64
	stopped                         atomic.Bool

	mu          sync.Mutex
	producedSet map[int64]bool // message numbers whose Put returned nil, this run
}

// consumerGroup is one channel of the topic and what its consumers did.
type consumerGroup struct {
	name       string
	work       time.Duration
	ch         *spillq.Channel
	finished   atomic.Int64
	duplicates atomic.Int64

	mu   sync.Mutex
	done map[int64]bool // message numbers finished, this run

	lastFinished int64 // for the view's rate; owned by the goroutine that draws
}

// runTopic runs the -topic mode in dir/topic.
func runTopic(ctx context.Context, cfg config, dir string, disk diskqueue.Options, out io.Writer) error {
	tp, err := spillq.OpenTopic(filepath.Join(dir, "topic"), spillq.TopicOptions{Disk: disk})
	if err != nil {
		return err
	}
	t := &topicDemo{cfg: cfg, topic: tp, producedSet: map[int64]bool{}}
	for _, g := range []*consumerGroup{{name: "billing", work: cfg.work}, {name: "analytics", work: cfg.work * analyticsSlowdown}} {
		// Both before the producers start, so each gets every message; on
		// a rerun with the same -dir, each goes on from where it was.
		g.ch, err = tp.Channel(g.name, spillq.ChannelOptions{MemQueueSize: cfg.mem, MsgTimeout: 5 * time.Second})
		if err != nil {
			tp.Close()
			return err
		}
		g.done = map[int64]bool{}
		t.groups = append(t.groups, g)
	}
	if cfg.metrics != "" {
		stopMetrics, err := serveMetrics(cfg.metrics, metrics.NewTopicCollector("demo", tp), out)
		if err != nil {
			tp.Close()
			return err
		}
		defer stopMetrics()
	}
	if cfg.nsqd != "" {
		topics := map[string]*spillq.Topic{"demo": tp}
		stop, err := serveNSQ(cfg.nsqd, nsqhttp.Options{Topics: topics, Health: nsqhttp.Check(nil, topics, spillq.HealthOptions{MaxLag: 5 * time.Second})}, out)
		if err != nil {
			tp.Close()
			return err
		}
		defer stop()
	}
	start := time.Now()
	produceFor := cfg.duration * 4 / 10
	t.view = newView(out, cfg, nil, start, produceFor)
	// Numbered from the start time, so none is a number an earlier run on
	// the same -dir left waiting.
	runErr := drive(ctx, cfg, t, start.UnixNano(), t.draw, t.view.interval(), produceFor)
	closeErr := tp.Close()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return closeErr
	}
	t.summary(out, cfg.dir == "")
	return nil
}

// put, and the methods below, make the topic demo a workload for drive.
func (t *topicDemo) put(ctx context.Context, n int64, b []byte) error {
	if err := t.topic.Put(ctx, b); err != nil {
		return err
	}
	t.produced.Add(1)
	t.mu.Lock()
	t.producedSet[n] = true
	t.mu.Unlock()
	return nil
}

func (t *topicDemo) consumers() []consumer {
	var cons []consumer
	for _, g := range t.groups {
		c := consumer{ch: g.ch, work: g.work, fail: t.cfg.fail, requeued: &t.requeued, redelivered: &t.redelivered,
			finishing: func(int64) {},
			finished: func(n int64) {
				g.mu.Lock()
				if g.done[n] {
					g.duplicates.Add(1)
				}
				g.done[n] = true
				g.mu.Unlock()
				g.finished.Add(1)
			},
		}
		for range t.cfg.consumers {
			cons = append(cons, c)
		}
	}
	return cons
}

func (t *topicDemo) progress() int64 {
	var n int64
	for _, g := range t.groups {
		n += g.finished.Load()
	}
	return n
}

func (t *topicDemo) backlog() int64 {
	var n int64
	for _, cs := range t.topic.Stats().Channels {
		n += cs.Cursor.Depth + int64(cs.Channel.MemoryDepth)
	}
	return n
}

func (t *topicDemo) drained() bool {
	for _, cs := range t.topic.Stats().Channels {
		c := cs.Channel
		if cs.Cursor.Depth > 0 || c.MemoryDepth > 0 || c.InFlight > 0 || c.Deferred > 0 || c.Ready > 0 {
			return false
		}
	}
	return true
}

func (t *topicDemo) stop() { t.stopped.Store(true) }

// draw shows the topic's Puts and, for each channel, how far behind it
// is: its depth (records of the log it has not finished) and lag (the age
// of the oldest of them). The same lines serve the terminal, redrawn in
// place, and plain output, once a second.
func (t *topicDemo) draw(final bool) {
	v := t.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.tty && final {
		return // the summary follows
	}
	now := time.Now()
	secs := max(now.Sub(v.lastAt).Seconds(), 1e-9)
	put := t.produced.Load()
	st := t.topic.Stats()
	elapsed := now.Sub(v.start)
	lines := []string{
		fmt.Sprintf("spillq demo -topic  %4.1fs  %s", elapsed.Seconds(), v.phase(final, t.stopped.Load(), elapsed)),
		fmt.Sprintf("  put        %d (%.0f/s)  log %s in %d segment(s)  requeued %d, redelivered %d",
			put, float64(put-v.lastPut)/secs, bytesString(st.Log.DiskBytes), st.Log.Segments, t.requeued.Load(), t.redelivered.Load()),
	}
	for _, g := range t.groups {
		var cs spillq.ChannelStats
		for _, c := range st.Channels {
			if c.Name == g.name {
				cs = c
			}
		}
		fin := g.finished.Load()
		// Depth and lag first: on a narrow terminal the end of the line
		// is what is cut.
		lines = append(lines, fmt.Sprintf("  %-10s depth %d  lag %v  finished %d (%.0f/s)  in flight %d  deferred %d  memory %d",
			g.name, cs.Cursor.Depth, cs.Lag.Round(10*time.Millisecond), fin, float64(fin-g.lastFinished)/secs,
			cs.Channel.InFlight, cs.Channel.Deferred, cs.Channel.MemoryDepth))
		g.lastFinished = fin
	}
	v.lastAt, v.lastPut = now, put
	if !v.tty {
		for _, l := range lines {
			fmt.Fprintln(v.out, l)
		}
		return
	}
	for i, l := range lines {
		lines[i] = fitWidth(l, v.width())
	}
	v.paintLocked(lines, final)
}

// summary prints the summary line, for each channel what it finished, and
// what is left: each message counts once for each channel that did not
// finish it.
//
//	summary topic produced=N billing=N analytics=N duplicates=N waiting=N lost=N
func (t *topicDemo) summary(out io.Writer, temporary bool) {
	unfinished, duplicates := 0, int64(0)
	t.mu.Lock()
	for _, g := range t.groups {
		g.mu.Lock()
		for n := range t.producedSet {
			if !g.done[n] {
				unfinished++
			}
		}
		g.mu.Unlock()
		duplicates += g.duplicates.Load()
	}
	t.mu.Unlock()
	waiting, lost := 0, unfinished
	if t.stopped.Load() {
		waiting, lost = unfinished, 0
	}
	fmt.Fprintf(out, "summary topic produced=%d", t.produced.Load())
	for _, g := range t.groups {
		fmt.Fprintf(out, " %s=%d", g.name, g.finished.Load())
	}
	fmt.Fprintf(out, " duplicates=%d waiting=%d lost=%d\n", duplicates, waiting, lost)
	switch {
	case waiting > 0 && temporary:
		fmt.Fprintf(out, "note: stopped by a signal; %d deliveries not finished were kept on disk by Close, in a temporary directory now removed: run with -dir DIR to keep them\n", waiting)
	case waiting > 0:
		fmt.Fprintf(out, "note: stopped by a signal; %d deliveries not finished are on disk in %s: run again with -topic -dir %s to deliver them\n", waiting, t.cfg.dir, t.cfg.dir)
	case lost > 0:
		fmt.Fprintf(out, "note: %d deliveries were lost: this is a bug, please report it\n", lost)
	}
}
