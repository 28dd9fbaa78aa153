package spillq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/internal/histogram"
)

// Handler does the work of one message. Its result answers the message:
//
//   - nil finishes it;
//   - an error retries it after [WorkerOptions.Backoff]'s delay, counting
//     the attempt; after its last attempt it goes to the queue's dead
//     letters with that error;
//   - [Permanent](err) dead-letters it at once, whatever attempts it has
//     left (a body that can never be processed);
//   - [Snooze](d) gives it back for d without spending an attempt.
//
// A panic is recovered and is an error (a [*PanicError], with the stack).
// ctx is cancelled when the attempt's Timeout passes, and when the worker
// stops and the handler has not finished within ShutdownTimeout; the
// handler should return then. It must not answer m itself (Finish,
// Requeue...): the worker does, by the result.
type Handler func(ctx context.Context, m *Message) error

// WorkerOptions configures [NewWorker]. The zero value is valid; each
// field says what zero means.
type WorkerOptions struct {
	// Concurrency is how many handlers run at once, each on a goroutine of
	// its own that takes one message at a time. Zero means
	// runtime.GOMAXPROCS(0).
	Concurrency int

	// Timeout bounds one attempt: the handler's ctx is cancelled once it
	// has run this long, and the error it then returns retries the
	// message. Zero means no bound (the message's lease is still kept
	// alive while the handler runs).
	Timeout time.Duration

	// ShutdownTimeout is how long handlers still running when Run's ctx
	// ends may go on before their ctx is cancelled. A message whose
	// handler then returns an error is given back without spending an
	// attempt (Message.Release), so a deploy never dead-letters a job
	// that did not fail; one whose handler returns nil is finished. Zero
	// means 10 seconds; negative cancels them at once.
	ShutdownTimeout time.Duration

	// Backoff is the delay before a failed message is delivered again,
	// given its attempts so far (this one included) and the error. Nil
	// means [ExponentialBackoff](time.Second, 10*time.Minute).
	Backoff func(attempts uint16, err error) time.Duration

	// TouchInterval is how often the message of a running handler is
	// touched (Message.Touch), so that a job longer than the source's
	// MsgTimeout is not delivered to a second worker meanwhile. Zero
	// means a third of the source's MsgTimeout (learned from a source
	// with a MsgTimeout method, as a Queue, a topic's channel and an
	// nsqbridge.Consumer have; 60 s, both spillq's and nsqd's default,
	// for any other); negative turns touching off.
	TouchInterval time.Duration

	// Logger receives the worker's warnings: a message it could not
	// answer (its lease lost, the source closed). Nil discards.
	Logger *slog.Logger
}

// DefaultShutdownTimeout is WorkerOptions.ShutdownTimeout's zero value.
const DefaultShutdownTimeout = 10 * time.Second

// ErrWorkerRunning is returned by [Worker.Run] on a worker already
// running.
var ErrWorkerRunning = errors.New("spillq: worker is already running")

// A Worker runs a [Handler] over the messages of a [channel.Receiver]: a
// [Queue], a topic's [Channel], or an nsqbridge.Consumer reading from nsqd,
// so the same handler moves between them unchanged. It is safe for
// concurrent use; Run runs once at a time.
type Worker struct {
	src        channel.Receiver
	handle     Handler
	opts       WorkerOptions
	touchEvery time.Duration // <= 0: never
	log        *slog.Logger
	running    atomic.Bool

	// lanes are the handler goroutines' own state, one each, summed by
	// Stats: counters every goroutine bumped on shared cache lines cost
	// the drain a sixth of its time.
	lanes []lane
}

// lane is one handler goroutine's state. Written by that goroutine only
// (working is also read by the keeper, the rest by Stats).
type lane struct {
	// working is the message its handler has now, nil between two.
	working    atomic.Pointer[channel.Message]
	counts     [numOutcomes]atomic.Int64
	panics     atomic.Int64
	answerErrs atomic.Int64
	duration   histogram.Histogram
	// attempts counts this lane's handler calls; last is the duration of
	// the last one timed (see timed).
	attempts int64
	last     time.Duration
	_        [64]byte // keeps the next lane's first words off this one's last line
}

// shortHandler is how short a handler's last timed run must be for the
// lane to time only one run in timeEvery: two clock reads (about 50 ns
// each on a virtual machine) and the histogram were a fifth of the drain
// with a no-op handler (BenchmarkWorkerRatio), and nothing of one that
// does real work. The others are counted with the last timed duration, as
// the channel's latency histogram does under a backlog: the count stays
// exact, the shape of very short handlers' durations is a 1-in-8 sample.
const (
	shortHandler = 50 * time.Microsecond
	timeEvery    = 8
)

// timed reports whether this run of the lane's handler is to be timed.
func (l *lane) timed() bool {
	l.attempts++
	return l.last >= shortHandler || l.attempts%timeEvery == 1
}

// NewWorker returns a worker that runs h over src's messages once Run is
// called.
func NewWorker(src channel.Receiver, h Handler, opts WorkerOptions) (*Worker, error) {
	if src == nil || h == nil {
		return nil, fmt.Errorf("spillq: %w: NewWorker needs a source and a handler", channel.ErrInvalidOptions)
	}
	if opts.Concurrency < 0 || opts.Timeout < 0 {
		return nil, fmt.Errorf("spillq: %w: worker Concurrency %d, Timeout %v: neither may be negative", channel.ErrInvalidOptions, opts.Concurrency, opts.Timeout)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = runtime.GOMAXPROCS(0)
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Backoff == nil {
		opts.Backoff = ExponentialBackoff(time.Second, 10*time.Minute)
	}
	w := &Worker{src: src, handle: h, opts: opts, log: opts.Logger, touchEvery: opts.TouchInterval}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.touchEvery == 0 {
		timeout := channel.DefaultMsgTimeout
		if s, ok := src.(interface{ MsgTimeout() time.Duration }); ok && s.MsgTimeout() > 0 {
			timeout = s.MsgTimeout()
		}
		w.touchEvery = timeout / 3
	}
	w.lanes = make([]lane, opts.Concurrency)
	return w, nil
}

// Run takes messages and runs the handler on them until ctx ends, then
// stops taking work, gives running handlers ShutdownTimeout to finish, and
// returns once every message it took is answered: finished, retried, dead-
// lettered, or given back. It returns nil when ctx ended, or the source's
// error (channel.ErrClosed: the queue was closed under it).
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrWorkerRunning
	}
	defer w.running.Store(false)

	// Handlers run on a context of their own, cancelled ShutdownTimeout
	// after ctx (or the taking) ends: a SIGTERM stops the taking, not
	// the work in hand.
	take, stopTaking := context.WithCancel(ctx)
	defer stopTaking()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopGrace := context.AfterFunc(take, func() {
		if w.opts.ShutdownTimeout < 0 {
			cancelWork()
			return
		}
		t := time.AfterFunc(w.opts.ShutdownTimeout, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopGrace()

	var wg sync.WaitGroup
	if w.touchEvery > 0 {
		keeperDone := make(chan struct{})
		defer func() { close(keeperDone); wg.Wait() }()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.keep(keeperDone)
		}()
	}
	var loops sync.WaitGroup
	errs := make([]error, w.opts.Concurrency)
	for i := range w.opts.Concurrency {
		loops.Add(1)
		go func() {
			defer loops.Done()
			if errs[i] = w.loop(take, work, &w.lanes[i]); errs[i] != nil {
				stopTaking() // the others stop too
			}
		}()
	}
	loops.Wait()
	if ctx.Err() != nil {
		return nil
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("spillq: worker: %w", err)
		}
	}
	return nil
}

// loop is one handler goroutine: take a message, run the handler, answer.
func (w *Worker) loop(take, work context.Context, l *lane) error {
	for {
		m, err := w.src.Receive(take)
		if err != nil {
			if take.Err() != nil {
				return nil
			}
			return err
		}
		l.working.Store(m)
		err = w.run(work, m, l)
		l.working.Store(nil)
		w.answer(work, m, err, l)
	}
}

// run calls the handler on m within the attempt's Timeout, recovering a
// panic into a *PanicError.
func (w *Worker) run(work context.Context, m *channel.Message, l *lane) (err error) {
	ctx, cancel := work, context.CancelFunc(nil)
	if w.opts.Timeout > 0 {
		ctx, cancel = context.WithTimeout(work, w.opts.Timeout)
	}
	var start time.Time
	timed := l.timed()
	if timed {
		start = time.Now()
	}
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
		if cancel != nil {
			cancel()
		}
		if timed {
			l.last = time.Since(start)
		}
		l.duration.Record(l.last)
	}()
	return w.handle(ctx, m)
}

// answer answers m by its handler's result.
func (w *Worker) answer(work context.Context, m *channel.Message, result error, l *lane) {
	var (
		out outcome
		err error
	)
	switch {
	case result == nil:
		out, err = outFinished, m.Finish()
	case work.Err() != nil:
		// Cut short by the shutdown: not the job's failure.
		out, err = outReleased, m.Release(0)
	default:
		out, err = w.failed(m, result)
	}
	l.counts[out].Add(1)
	if err != nil {
		l.answerErrs.Add(1)
		w.log.Warn("spillq: worker cannot answer a message; its source delivers it again", "id", m.ID.String(), "answer", out.String(), "err", err)
	}
}

// failed answers a message whose handler returned result. (Apart from
// answer, so the targets errors.As needs are allocated only here.)
func (w *Worker) failed(m *channel.Message, result error) (outcome, error) {
	var sn *snoozeError
	var pe *permanentError
	switch {
	case errors.As(result, &sn):
		return outSnoozed, m.Release(sn.d)
	case errors.As(result, &pe):
		return outFailed, m.Fail(pe.err)
	case m.LastAttempt():
		return outDeadLettered, m.Retry(0, result)
	default:
		return outRetried, m.Retry(w.opts.Backoff(m.Attempts, result), result)
	}
}

// keep touches the messages of running handlers every touchEvery until
// done is closed. A message taken just before a round is touched early,
// one taken just after it within touchEvery: well within its timeout.
func (w *Worker) keep(done <-chan struct{}) {
	t := time.NewTicker(w.touchEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			for i := range w.lanes {
				if m := w.lanes[i].working.Load(); m != nil {
					// ErrNotInFlight: its handler has just returned, or its
					// lease was lost; the answer will say.
					_ = m.Touch()
				}
			}
		}
	}
}

// outcome is how a message's delivery ended.
type outcome uint8

const (
	outFinished     outcome = iota // handler returned nil
	outRetried                     // an error, attempts left: delivered again after Backoff
	outDeadLettered                // an error on the last attempt
	outFailed                      // Permanent: dead-lettered at once
	outSnoozed                     // Snooze: given back for a while, unspent
	outReleased                    // the shutdown cut it short: given back, unspent
	numOutcomes
)

func (o outcome) String() string {
	return [...]string{"finished", "retried", "dead_lettered", "failed", "snoozed", "released"}[o]
}

// WorkerStats counts what a worker has done since NewWorker.
type WorkerStats struct {
	InProgress int64 // handlers running now

	Finished     int64 // handler returned nil
	Retried      int64 // an error, delivered again after Backoff
	DeadLettered int64 // an error on the message's last attempt
	Failed       int64 // Permanent: dead-lettered at once
	Snoozed      int64 // Snooze: given back, no attempt spent
	Released     int64 // cut short by a shutdown: given back, no attempt spent
	Panics       int64 // handler panics (each also counted as its error's outcome)
	// AnswerErrors counts answers the source refused: the message's lease
	// ran out (its handler outlived MsgTimeout with touching off, say) or
	// the source closed. The source delivers such a message again.
	AnswerErrors int64
}

// Stats returns the worker's counters. It takes no lock.
func (w *Worker) Stats() WorkerStats {
	var st WorkerStats
	var counts [numOutcomes]int64
	for i := range w.lanes {
		l := &w.lanes[i]
		if l.working.Load() != nil {
			st.InProgress++
		}
		for o := range counts {
			counts[o] += l.counts[o].Load()
		}
		st.Panics += l.panics.Load()
		st.AnswerErrors += l.answerErrs.Load()
	}
	st.Finished, st.Retried, st.DeadLettered = counts[outFinished], counts[outRetried], counts[outDeadLettered]
	st.Failed, st.Snoozed, st.Released = counts[outFailed], counts[outSnoozed], counts[outReleased]
	return st
}

// DurationBuckets returns the handler duration histogram: the exclusive
// upper bound of each bucket that holds anything, and its count (for
// package metrics). Every handler call is counted; while a goroutine's
// handler runs under 50 µs, one call in 8 is timed and stands for the
// others.
func (w *Worker) DurationBuckets() (upper []time.Duration, counts []uint64) {
	hs := make([]*histogram.Histogram, len(w.lanes))
	for i := range w.lanes {
		hs[i] = &w.lanes[i].duration
	}
	return histogram.SnapshotOf(hs...)
}

// DurationSumSeconds returns the sum of every handler duration recorded.
func (w *Worker) DurationSumSeconds() float64 {
	var s float64
	for i := range w.lanes {
		s += w.lanes[i].duration.SumSeconds()
	}
	return s
}
