package nsqbridge

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/channel"
)

// ConsumerOptions configures [NewConsumer].
type ConsumerOptions struct {
	Topic, Channel string // required
	// NSQD lists nsqd TCP addresses to read from directly; Lookupd lists
	// nsqlookupd HTTP addresses to discover them. At least one is required.
	NSQD, Lookupd []string
	// MaxInFlight is how many messages nsqd may send before they are
	// finished (go-nsq's max_in_flight). Zero means 100.
	MaxInFlight int
	// MsgTimeout asks nsqd to time messages out and deliver them again
	// after this long unfinished. Zero means nsqd's default (60 s).
	MsgTimeout time.Duration
	// NSQConfig configures the go-nsq consumer; MaxInFlight and MsgTimeout
	// override its fields. Nil means nsq.NewConfig().
	NSQConfig *nsq.Config
}

// Consumer reads an nsqd channel and hands out *channel.Message values: it
// is a channel.Receiver. It is safe for concurrent use.
type Consumer struct {
	c      *nsq.Consumer
	msgs   chan *nsq.Message
	stopCh chan struct{}
	once   sync.Once

	received, finished, requeued atomic.Int64

	// mu guards outstanding: messages handed out and not yet answered,
	// which Close requeues so go-nsq's Stop does not wait for them.
	mu          sync.Mutex
	outstanding map[*nsqAcker]struct{}
}

// ErrClosed is returned by Receive after Close.
var ErrClosed = errors.New("nsqbridge: consumer closed")

// NewConsumer connects to nsqd (or nsqlookupd) and starts receiving.
func NewConsumer(o ConsumerOptions) (*Consumer, error) {
	if o.Topic == "" || o.Channel == "" || len(o.NSQD)+len(o.Lookupd) == 0 {
		return nil, fmt.Errorf("%w: Topic, Channel and an NSQD or Lookupd address are required", ErrInvalidOptions)
	}
	cfg := o.NSQConfig
	if cfg == nil {
		cfg = nsq.NewConfig()
	}
	cfg.MaxInFlight = 100
	if o.MaxInFlight > 0 {
		cfg.MaxInFlight = o.MaxInFlight
	}
	if o.MsgTimeout > 0 {
		cfg.MsgTimeout = o.MsgTimeout
	}
	nc, err := nsq.NewConsumer(o.Topic, o.Channel, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	nc.SetLogger(log.New(discard{}, "", 0), nsq.LogLevelError)
	c := &Consumer{c: nc, msgs: make(chan *nsq.Message), stopCh: make(chan struct{}), outstanding: map[*nsqAcker]struct{}{}}
	nc.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		// The worker responds, through Finish or Requeue; go-nsq must not.
		m.DisableAutoResponse()
		select {
		case c.msgs <- m:
		case <-c.stopCh:
			m.RequeueWithoutBackoff(0) // not delivered: give it back
		}
		return nil
	}))
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

// Receive returns the next message from nsqd, waiting until there is one,
// ctx ends or the consumer closes. As with a Channel, the message must be
// finished or requeued; unfinished it times out and nsqd delivers it again.
func (c *Consumer) Receive(ctx context.Context) (*channel.Message, error) {
	select {
	case m := <-c.msgs:
		c.received.Add(1)
		id, _ := strconv.ParseUint(string(m.ID[:]), 16, 64)
		a := &nsqAcker{c: c, m: m}
		c.mu.Lock()
		c.outstanding[a] = struct{}{}
		c.mu.Unlock()
		return channel.NewMessage(channel.ID(id), m.Body, time.Unix(0, m.Timestamp), m.Attempts, a), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.stopCh:
		return nil, ErrClosed
	}
}

// nsqAcker answers one nsqd message.
type nsqAcker struct {
	c         *Consumer
	m         *nsq.Message
	responded atomic.Bool
}

// respond claims the one answer a message gets.
func (a *nsqAcker) respond() bool {
	if !a.responded.CompareAndSwap(false, true) {
		return false
	}
	a.c.mu.Lock()
	delete(a.c.outstanding, a)
	a.c.mu.Unlock()
	return true
}

func (a *nsqAcker) Finish(*channel.Message) error {
	if !a.respond() {
		return channel.ErrNotInFlight
	}
	a.m.Finish()
	a.c.finished.Add(1)
	return nil
}

func (a *nsqAcker) Requeue(_ *channel.Message, delay time.Duration) error {
	if !a.respond() {
		return channel.ErrNotInFlight
	}
	a.m.RequeueWithoutBackoff(delay)
	a.c.requeued.Add(1)
	return nil
}

func (a *nsqAcker) Touch(*channel.Message) error {
	if a.responded.Load() {
		return channel.ErrNotInFlight
	}
	a.m.Touch()
	return nil
}

// ConsumerStats counts what a consumer has done.
type ConsumerStats struct {
	Received, Finished, Requeued int64
	Connections                  int // nsqd connections open now
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Received:    c.received.Load(),
		Finished:    c.finished.Load(),
		Requeued:    c.requeued.Load(),
		Connections: c.c.Stats().Connections,
	}
}

// Close stops receiving and waits for the connections to close. Messages
// received and not yet finished are requeued (nsqd delivers them again);
// finishing them afterwards returns channel.ErrNotInFlight.
func (c *Consumer) Close() error {
	c.once.Do(func() {
		close(c.stopCh)
		c.mu.Lock()
		held := make([]*nsqAcker, 0, len(c.outstanding))
		for a := range c.outstanding {
			held = append(held, a)
		}
		c.mu.Unlock()
		for _, a := range held {
			if a.respond() {
				a.m.RequeueWithoutBackoff(0)
			}
		}
		c.c.Stop()
		<-c.c.StopChan
	})
	return nil
}
