package nsqbridge

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/channel"
)

// ConsumerOptions configures [NewConsumer]. Every zero value means the
// default named on its field.
type ConsumerOptions struct {
	Topic, Channel string // required
	// NSQD lists nsqd TCP addresses to read from directly; Lookupd lists
	// nsqlookupd HTTP addresses to discover them. At least one is required.
	NSQD, Lookupd []string
	// MaxInFlight is how many messages nsqd may send before they are
	// finished (go-nsq's max_in_flight). Zero means 100.
	MaxInFlight int
	// MsgTimeout is how long a message may stay unfinished before nsqd
	// delivers it again; the consumer asks nsqd for it, so both sides time
	// messages out alike. Zero means 60 s (nsqd's default --msg-timeout).
	MsgTimeout time.Duration
	// MaxAttempts is how many deliveries a message gets, as
	// channel.Options.MaxAttempts: a message requeued after its last
	// attempt, or delivered again after it timed out on its last attempt,
	// goes to DeadLetter and is finished at nsqd. Zero means unlimited (and
	// go-nsq's own max_attempts, which finishes such messages silently, is
	// turned off).
	MaxAttempts uint16
	// DeadLetter receives messages that ran out of attempts, with
	// channel.ErrMaxAttempts, or that a worker failed (Message.Fail), with
	// channel.ErrFailed, as channel.Options.DeadLetter does; the message
	// is finished at nsqd once it returns nil, and requeued there for a
	// second if it returns an error. The message is no longer in flight. It runs on a go-nsq goroutine, or in
	// the worker's Requeue, and must not block for long, nor call Close
	// (which waits for go-nsq's goroutines). Nil logs the message at Warn
	// and drops it; Stats counts it either way.
	DeadLetter func(m *channel.Message, reason error) error
	// NSQConfig configures the go-nsq consumer; MaxInFlight, MsgTimeout
	// and MaxAttempts override its fields. Nil means nsq.NewConfig().
	NSQConfig *nsq.Config
	// Logger receives dead letters dropped for want of a DeadLetter
	// handler. Nil discards.
	Logger *slog.Logger
}

// Defaults documented on the ConsumerOptions fields.
const (
	DefaultMaxInFlight = 100
	DefaultMsgTimeout  = 60 * time.Second
)

// Consumer reads an nsqd channel and hands out *channel.Message values: it
// is a channel.Receiver, and its messages behave as a Channel's do. A
// message's Finish, Requeue and Touch go to nsqd while it is in flight;
// after its MsgTimeout has passed (nsqd then delivers it again) or once it
// was answered they return channel.ErrNotInFlight and send nothing.
// It is safe for concurrent use.
type Consumer struct {
	opts   ConsumerOptions
	log    *slog.Logger
	c      *nsq.Consumer
	msgs   chan delivery
	stopCh chan struct{}
	once   sync.Once

	received, finished, requeued, deadLetters, deadLetterErrors atomic.Int64

	// mu guards the fields below, and every change of an outstanding
	// delivery's deadline (Touch). outstanding is the deliveries handed
	// out and not yet answered, which Close requeues so go-nsq's Stop does
	// not wait for them; Stats counts those past their deadline as timed
	// out, not in flight, and answer then settles them as timed out, so
	// none is counted twice or leaves the count. timedOut counts the timed
	// out deliveries answered. held counts the outstanding deliveries by
	// message ID; owed is the timed out deliveries whose REQ waits for a
	// later delivery of the same message to be answered (see
	// nsqAcker.answer). closing is set by Close as it takes the
	// outstanding ones to requeue: a delivery tracked after that is
	// requeued at once.
	mu          sync.Mutex
	closing     bool
	outstanding map[*nsqAcker]struct{}
	held        map[nsq.MessageID]int
	owed        map[nsq.MessageID][]*nsqAcker
	timedOut    int64
}

// delivery is a message from nsqd, when it arrived and when its timeout
// runs out.
type delivery struct {
	m                 *nsq.Message
	arrived, deadline int64 // Unix ns
}

// NewConsumer connects to nsqd (or nsqlookupd) and starts receiving.
func NewConsumer(o ConsumerOptions) (*Consumer, error) {
	if o.Topic == "" || o.Channel == "" || len(o.NSQD)+len(o.Lookupd) == 0 {
		return nil, fmt.Errorf("%w: Topic, Channel and an NSQD or Lookupd address are required", ErrInvalidOptions)
	}
	if o.MaxInFlight < 0 || o.MsgTimeout < 0 {
		return nil, fmt.Errorf("%w: negative MaxInFlight or MsgTimeout", ErrInvalidOptions)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MsgTimeout == 0 {
		o.MsgTimeout = DefaultMsgTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := nsq.NewConfig()
	if o.NSQConfig != nil {
		cp := *o.NSQConfig // never write into the caller's config
		cfg = &cp
	}
	cfg.MaxInFlight = o.MaxInFlight
	cfg.MsgTimeout = o.MsgTimeout
	cfg.MaxAttempts = 0 // attempts are counted here, as a Channel counts them
	nc, err := nsq.NewConsumer(o.Topic, o.Channel, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	nc.SetLogger(log.New(discard{}, "", 0), nsq.LogLevelError)
	c := &Consumer{
		opts: o, log: o.Logger.With("topic", o.Topic, "channel", o.Channel), c: nc,
		msgs: make(chan delivery), stopCh: make(chan struct{}), outstanding: map[*nsqAcker]struct{}{},
		held: map[nsq.MessageID]int{}, owed: map[nsq.MessageID][]*nsqAcker{},
	}
	nc.AddHandler(nsq.HandlerFunc(c.handle))
	if len(o.NSQD) > 0 {
		err = nc.ConnectToNSQDs(o.NSQD)
	} else {
		err = nc.ConnectToNSQLookupds(o.Lookupd)
	}
	if err != nil {
		nc.Stop()
		<-nc.StopChan
		return nil, fmt.Errorf("nsqbridge: connect: %w", err)
	}
	return c, nil
}

// handle runs on go-nsq's goroutines for each message nsqd sends, and
// waits until Receive takes it.
func (c *Consumer) handle(m *nsq.Message) error {
	// The worker responds, through Finish or Requeue; go-nsq must not.
	m.DisableAutoResponse()
	now := time.Now()
	d := delivery{m: m, arrived: now.UnixNano(), deadline: now.Add(c.opts.MsgTimeout).UnixNano()}
	if c.opts.MaxAttempts > 0 && m.Attempts > c.opts.MaxAttempts {
		// It timed out on its last attempt and nsqd sent it again.
		if a := c.track(d); a != nil {
			a.answer(func() { c.deadLetter(a, c.message(a), channel.ErrMaxAttempts) })
		}
		return nil
	}
	select {
	case c.msgs <- d:
	case <-c.stopCh:
		m.RequeueWithoutBackoff(0) // not delivered: give it back
	}
	return nil
}

// exhausted reports whether a message that had attempts deliveries may have
// no more.
func (c *Consumer) exhausted(attempts uint16) bool {
	return c.opts.MaxAttempts > 0 && attempts >= c.opts.MaxAttempts
}

// deadLetter hands m to the DeadLetter handler and finishes it at nsqd;
// it runs as the answer of m's acker a. A handler that fails leaves the
// message at nsqd: requeued for a second, it comes round again.
func (c *Consumer) deadLetter(a *nsqAcker, m *channel.Message, reason error) {
	if c.opts.DeadLetter != nil {
		if err := c.opts.DeadLetter(m, reason); err != nil {
			c.deadLetterErrors.Add(1)
			c.log.Warn("nsqbridge: dead-letter handler failed; the message goes back to nsqd for a second",
				"id", m.ID.String(), "reason", reason, "err", err)
			a.m.RequeueWithoutBackoff(time.Second)
			return
		}
	} else {
		c.log.Warn("nsqbridge: dropping dead letter (set ConsumerOptions.DeadLetter to keep them)",
			"id", m.ID.String(), "attempts", m.Attempts, "reason", reason)
	}
	c.deadLetters.Add(1)
	a.m.Finish()
}

// Receive returns the next message from nsqd, waiting until there is one,
// ctx ends or the consumer closes. As with a Channel, the message must be
// finished or requeued; unfinished it times out and nsqd delivers it again.
// A message whose timeout ran out before Receive took it is skipped: nsqd
// delivers it again. With a ctx that is already done it takes nothing and
// returns ctx.Err(), as a Channel's does.
func (c *Consumer) Receive(ctx context.Context) (*channel.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		select {
		case d := <-c.msgs:
			a := c.track(d)
			if a == nil {
				return nil, ErrClosed
			}
			if a.expired() {
				continue
			}
			c.received.Add(1)
			return c.message(a), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.stopCh:
			return nil, ErrClosed
		}
	}
}

// track starts the bookkeeping of a delivery, or, once Close has taken
// the outstanding ones, requeues it and returns nil: a Receive that took
// it from msgs as Close began returned it to the caller, held by nobody
// Close would requeue, in flight at nsqd until its timeout.
func (c *Consumer) track(d delivery) *nsqAcker {
	a := &nsqAcker{c: c, m: d.m, arrived: d.arrived}
	a.deadline.Store(d.deadline)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		d.m.RequeueWithoutBackoff(0)
		return nil
	}
	c.outstanding[a] = struct{}{}
	c.held[d.m.ID]++
	c.mu.Unlock()
	return a
}

func (c *Consumer) message(a *nsqAcker) *channel.Message {
	id, _ := strconv.ParseUint(string(a.m.ID[:]), 16, 64)
	return channel.NewMessage(channel.ID(id), a.m.Body, time.Unix(0, a.m.Timestamp), a.m.Attempts, a)
}

// nsqAcker answers one nsqd message.
type nsqAcker struct {
	c         *Consumer
	m         *nsq.Message
	arrived   int64        // Unix ns
	deadline  atomic.Int64 // Unix ns: nsqd times the message out then; written under c.mu
	responded atomic.Bool
}

// answer claims the one answer a delivery gets and sends it with send; it
// reports false if the delivery was answered already, or if its timeout
// has run out (send nil settles it so): then send does not run, and the
// delivery counts in TimedOut. That is decided under c.mu, where Stats
// decides which deliveries have timed out, so a delivery Stats counted as
// timed out is never then answered, nor counted twice.
//
// A delivery whose timeout ran out is answered with REQ, sent only
// because go-nsq waits, at Close, for an answer to every delivery. nsqd
// names a message by its ID across deliveries, so that REQ would requeue a
// later delivery of the same message to this consumer if one is held here:
// it waits until every such delivery was answered, and then finds nothing
// to requeue (nsqd replies E_REQ_FAILED, which go-nsq logs).
func (a *nsqAcker) answer(send func()) bool {
	if !a.responded.CompareAndSwap(false, true) {
		return false
	}
	c := a.c
	id := a.m.ID
	c.mu.Lock()
	expired := send == nil || time.Now().UnixNano() >= a.deadline.Load()
	delete(c.outstanding, a)
	c.held[id]--
	if expired {
		c.timedOut++
	}
	if expired && c.held[id] > 0 {
		c.owed[id] = append(c.owed[id], a)
		c.mu.Unlock()
		return false
	}
	var owed []*nsqAcker
	if c.held[id] == 0 {
		delete(c.held, id)
		owed = c.owed[id]
		delete(c.owed, id)
	}
	c.mu.Unlock()
	if expired {
		a.m.RequeueWithoutBackoff(0)
	} else {
		send()
	}
	for _, o := range owed {
		o.m.RequeueWithoutBackoff(0)
	}
	return !expired
}

// expired reports whether the delivery's timeout has run out, and if so
// gives up its answer: nsqd delivers the message again.
func (a *nsqAcker) expired() bool {
	if time.Now().UnixNano() < a.deadline.Load() {
		return false
	}
	a.answer(nil)
	return true
}

func (a *nsqAcker) Finish(*channel.Message) error {
	if !a.answer(a.m.Finish) {
		return channel.ErrNotInFlight
	}
	a.c.finished.Add(1)
	return nil
}

// Requeue sends the message back to nsqd, to be delivered again after
// delay; after its last attempt it goes to DeadLetter instead, with
// channel.ErrMaxAttempts and cause wrapped as a Channel wraps them.
func (a *nsqAcker) Requeue(m *channel.Message, delay time.Duration, cause error) error {
	if a.c.exhausted(a.m.Attempts) {
		reason := channel.OutOfAttemptsReason(m.Attempts, cause)
		if !a.answer(func() { a.c.deadLetter(a, m, reason) }) {
			return channel.ErrNotInFlight
		}
		return nil
	}
	if !a.answer(func() { a.m.RequeueWithoutBackoff(delay) }) {
		return channel.ErrNotInFlight
	}
	a.c.requeued.Add(1)
	return nil
}

// Release sends the message back to nsqd, to be delivered again after
// delay. nsqd counts every delivery, so unlike a Channel's Release this one
// spends the attempt.
func (a *nsqAcker) Release(_ *channel.Message, delay time.Duration) error {
	if !a.answer(func() { a.m.RequeueWithoutBackoff(delay) }) {
		return channel.ErrNotInFlight
	}
	a.c.requeued.Add(1)
	return nil
}

// Fail hands the message to DeadLetter now, with channel.ErrFailed and
// cause, and finishes it at nsqd.
func (a *nsqAcker) Fail(m *channel.Message, cause error) error {
	reason := channel.FailedReason(cause)
	if !a.answer(func() { a.c.deadLetter(a, m, reason) }) {
		return channel.ErrNotInFlight
	}
	return nil
}

func (a *nsqAcker) Touch(*channel.Message) error {
	c := a.c
	// Under mu, as Stats and answer look: a deadline Stats saw pass is
	// never moved on.
	c.mu.Lock()
	now := time.Now()
	live := !a.responded.Load() && now.UnixNano() < a.deadline.Load()
	if live {
		a.deadline.Store(now.Add(c.opts.MsgTimeout).UnixNano())
	}
	c.mu.Unlock()
	if !live {
		a.expired() // settles it as timed out if it is not answered
		return channel.ErrNotInFlight
	}
	a.m.Touch()
	return nil
}

// MsgTimeout returns the timeout the consumer asked nsqd for
// (ConsumerOptions.MsgTimeout, zero made the default): how long a delivery
// may go untouched.
func (c *Consumer) MsgTimeout() time.Duration { return c.opts.MsgTimeout }

// ConsumerStats counts what a consumer has done.
type ConsumerStats struct {
	Received, Finished, Requeued int64
	// DeadLetters counts messages DeadLetter took (or logged and
	// dropped): out of attempts, or failed (Message.Fail).
	// DeadLetterErrors counts DeadLetter's errors, each message it
	// refused requeued at nsqd for a second.
	DeadLetters, DeadLetterErrors int64
	// TimedOut counts messages whose timeout ran out before they were
	// answered (or before Receive took them); nsqd delivers them again.
	// A delivery counts here, and no longer in InFlight, from the moment
	// its timeout runs out, as at nsqd; answering it later (which returns
	// channel.ErrNotInFlight) does not count it again.
	TimedOut int64
	// InFlight is the messages received, not yet answered and within
	// their timeout, and OldestInFlight how long ago the oldest of them
	// arrived.
	InFlight       int
	OldestInFlight time.Duration
	Connections    int // nsqd connections open now
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	st := ConsumerStats{
		Received:         c.received.Load(),
		Finished:         c.finished.Load(),
		Requeued:         c.requeued.Load(),
		DeadLetters:      c.deadLetters.Load(),
		DeadLetterErrors: c.deadLetterErrors.Load(),
		Connections:      c.c.Stats().Connections,
	}
	c.mu.Lock()
	now := time.Now() // under mu, where answer and Touch read the clock
	st.TimedOut = c.timedOut
	for a := range c.outstanding {
		if now.UnixNano() >= a.deadline.Load() {
			// nsqd has timed it out; whatever answers it later settles it
			// as timed out (answer), so it stays counted once.
			st.TimedOut++
			continue
		}
		st.InFlight++
		st.OldestInFlight = max(st.OldestInFlight, now.Sub(time.Unix(0, a.arrived)))
	}
	c.mu.Unlock()
	return st
}

// Close stops receiving and waits for the connections to close. Messages
// received and not yet finished are requeued (nsqd delivers them again);
// finishing them afterwards returns channel.ErrNotInFlight.
func (c *Consumer) Close() error {
	c.once.Do(func() {
		// RDY 0 on every connection before any requeue (here, in track,
		// in handle): nsqd sends a requeued message to any client ready
		// for one, and this one, still ready, got one back, which then sat
		// in flight at nsqd until its timeout. What nsqd sent before it
		// read the RDY 0, handle gives back, stopCh being closed.
		c.c.ChangeMaxInFlight(0)
		close(c.stopCh)
		c.mu.Lock()
		c.closing = true
		held := make([]*nsqAcker, 0, len(c.outstanding))
		for a := range c.outstanding {
			held = append(held, a)
		}
		c.mu.Unlock()
		for _, a := range held {
			a.answer(func() { a.m.RequeueWithoutBackoff(0) })
		}
		c.c.Stop()
		<-c.c.StopChan
	})
	return nil
}
