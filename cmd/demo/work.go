package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// workload is what drive runs: the queue (demo) or the topic (topicDemo).
type workload interface {
	// put stores the message numbered n, with body b, and counts it.
	put(ctx context.Context, n int64, b []byte) error
	// consumers are the consumer goroutines to start, one each.
	consumers() []consumer
	// progress is the messages finished so far, to tell a stall.
	progress() int64
	// drained says nothing is waiting, in flight or deferred any more.
	drained() bool
	// backlog is the messages waiting, for the stall's error.
	backlog() int64
	// stop says a signal asked for a graceful stop: what is not finished
	// then stays on disk, waiting, rather than lost.
	stop()
}

// drive runs cfg.producers producers, numbering messages from first, for
// produceFor, and w's consumers until w has drained; or until ctx ends
// (a graceful stop) or a goroutine fails. It calls draw every interval,
// and draw(true) at the end.
func drive(ctx context.Context, cfg config, w workload, first int64, draw func(final bool), interval, produceFor time.Duration) error {
	prodCtx, stopProducing := context.WithTimeout(ctx, produceFor)
	defer stopProducing()
	consCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()

	var next atomic.Int64
	next.Store(first)
	cons := w.consumers()
	errs := make(chan error, cfg.producers+len(cons))
	var producers, consumers sync.WaitGroup
	for p := 0; p < cfg.producers; p++ {
		producers.Add(1)
		go func() { defer producers.Done(); errs <- produce(prodCtx, cfg, &next, w) }()
	}
	for _, c := range cons {
		consumers.Add(1)
		go func() { defer consumers.Done(); errs <- c.run(consCtx) }()
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	producersDone := make(chan struct{})
	go func() { producers.Wait(); close(producersDone) }()
	// Draining takes as long as the backlog needs; only a stall is an error.
	const stallLimit = 10 * time.Second
	lastProgress, lastFinished := time.Now(), int64(-1)
	drainedAt := int64(-1) // progress when drained was last seen, or -1
	var err error
loop:
	for {
		select {
		case <-ticker.C:
			draw(false)
			if f := w.progress(); f != lastFinished {
				lastProgress, lastFinished = time.Now(), f
			} else if time.Since(lastProgress) > stallLimit {
				err = fmt.Errorf("no message finished for %v with %d waiting", stallLimit, w.backlog())
				break loop
			}
		case e := <-errs:
			if e != nil && err == nil {
				err = e
				break loop
			}
		case <-producersDone:
			producersDone = nil
		case <-ctx.Done():
			w.stop()
			draw(false)
			break loop
		}
		// Drained twice in a row, a tick apart, with nothing finished in
		// between: a message a consumer is taking at the moment of one
		// look is counted in neither Depth nor InFlight, but not at both.
		if producersDone == nil && w.drained() {
			if f := w.progress(); f == drainedAt {
				break
			} else {
				drainedAt = f
			}
		} else {
			drainedAt = -1
		}
	}
	stopProducing()
	stopConsuming()
	producers.Wait()
	consumers.Wait()
	draw(true)
	return err
}

// produce puts messages to w at cfg.rate (as fast as it can with 0) until
// ctx ends. Each body starts with the message's number, taken from next.
func produce(ctx context.Context, cfg config, next *atomic.Int64, w workload) error {
	// Readable filler, so records look like something in `spillq dump`.
	body := bytes.Repeat([]byte("spillq demo payload "), cfg.size/20+1)[:cfg.size]
	perTick := max(cfg.rate/1000, 1)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if cfg.rate > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return nil
			}
		}
		for i := 0; i < perTick || cfg.rate == 0 && i < 100; i++ {
			n := next.Add(1) - 1
			b := append(strconv.AppendInt(make([]byte, 0, len(body)+20), n, 10), ' ')
			b = append(b, body[:max(0, cfg.size-len(b))]...)
			if err := w.put(ctx, n, b); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("put: %w", err)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// consumer is one consumer goroutine: it takes messages from ch and works
// on each for work; a share fail of deliveries fail and are requeued with
// a delay, the others are finished.
type consumer struct {
	ch   spillq.Receiver
	work time.Duration
	fail float64
	// requeued and redelivered count what their names say.
	requeued, redelivered *atomic.Int64
	// finishing is called with a message's number just before Finish, and
	// finished once Finish succeeded (not if the message timed out
	// meanwhile: it comes again).
	finishing, finished func(n int64)
}

func (c consumer) run(ctx context.Context) error {
	// Simulated work is slept in blocks of 2 ms or more: short sleeps
	// overshoot by a timer tick, which would make consumers far slower
	// than -work says.
	var owed time.Duration
	for {
		// Receive with ctx done takes nothing, so a stopped consumer
		// leaves the backlog on disk for a graceful stop.
		m, err := c.ch.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, channel.ErrClosed) {
				return nil
			}
			return fmt.Errorf("receive: %w", err)
		}
		if m.Attempts > 1 {
			c.redelivered.Add(1)
		}
		if owed += c.work; owed >= 2*time.Millisecond {
			start := time.Now()
			time.Sleep(owed)
			owed -= time.Since(start)
		}
		if c.fail > 0 && rand.Float64() < c.fail {
			c.requeued.Add(1)
			m.Requeue(10 * time.Millisecond)
			continue
		}
		n, _ := strconv.ParseInt(string(m.Body[:max(0, bytes.IndexByte(m.Body, ' '))]), 10, 64)
		c.finishing(n)
		if err := m.Finish(); err != nil {
			continue // timed out meanwhile: it will come again
		}
		c.finished(n)
	}
}
