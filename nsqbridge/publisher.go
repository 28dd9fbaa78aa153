package nsqbridge

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/broadcast"
)

// PublisherOptions configures [OpenPublisher].
type PublisherOptions struct {
	// NSQD is the TCP address (host:port) of the nsqd to publish to.
	// Required.
	NSQD string
	// Topic is the nsqd topic. Required.
	Topic string
	// Disk configures the local store-and-forward queue; its zero value is
	// diskqueue's defaults. Set Disk.SyncEvery to 1 for Publish to return
	// only once the message is on stable storage locally.
	Disk diskqueue.Options
	// BatchSize is the most messages forwarded in one MPUB. Zero means 100.
	BatchSize int
	// RetryInterval is how long the forwarder waits after nsqd failed
	// before it tries again. Zero means 500 ms.
	RetryInterval time.Duration
	// NSQConfig configures the go-nsq producer. Nil means nsq.NewConfig().
	NSQConfig *nsq.Config
	// Logger receives forwarding errors (once per outage) and recoveries.
	// Nil discards.
	Logger *slog.Logger
}

// Publisher publishes to nsqd through a local disk queue. It is safe for
// concurrent use.
type Publisher struct {
	opts PublisherOptions
	q    *diskqueue.Queue
	prod *nsq.Producer // used by the forwarder only (and by Close after it)
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the forwarder returns
	once   sync.Once

	forwarded, forwardErrors, reconnects atomic.Int64

	progress broadcast.Broadcast // every batch nsqd acknowledged
}

// ErrInvalidOptions is returned by OpenPublisher and NewConsumer for a
// missing or out-of-range option.
var ErrInvalidOptions = errors.New("nsqbridge: invalid options")

// OpenPublisher opens (or creates) the local queue in dir and starts
// forwarding it to nsqd, backlog first.
func OpenPublisher(dir string, o PublisherOptions) (*Publisher, error) {
	if o.NSQD == "" || o.Topic == "" {
		return nil, fmt.Errorf("%w: NSQD and Topic are required", ErrInvalidOptions)
	}
	if o.BatchSize < 0 || o.RetryInterval < 0 {
		return nil, fmt.Errorf("%w: negative BatchSize or RetryInterval", ErrInvalidOptions)
	}
	if o.BatchSize == 0 {
		o.BatchSize = 100
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = 500 * time.Millisecond
	}
	if o.NSQConfig == nil {
		o.NSQConfig = nsq.NewConfig()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	prod, err := newProducer(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	q, err := diskqueue.Open(dir, o.Disk)
	if err != nil {
		prod.Stop()
		return nil, fmt.Errorf("nsqbridge: %w", err)
	}
	p := &Publisher{opts: o, q: q, prod: prod, log: o.Logger.With("topic", o.Topic, "nsqd", o.NSQD), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.forward()
	return p, nil
}

func newProducer(o PublisherOptions) (*nsq.Producer, error) {
	prod, err := nsq.NewProducer(o.NSQD, o.NSQConfig)
	if err != nil {
		return nil, err
	}
	prod.SetLogger(log.New(discard{}, "", 0), nsq.LogLevelError)
	return prod, nil
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// Publish stores body in the local queue; the forwarder sends it to nsqd.
// It returns once the local queue has it (durably, with Disk.SyncEvery 1),
// whether or not nsqd is reachable.
func (p *Publisher) Publish(ctx context.Context, body []byte) error {
	return p.q.Put(ctx, body)
}

// forward sends the local queue to nsqd in order, in batches, and removes
// each record only after nsqd acknowledged it. A batch that fails is sent
// again, whole, until it goes through or the publisher closes; so order
// holds and nothing is dropped.
func (p *Publisher) forward() {
	defer close(p.done)
	failing := false
	for {
		first, err := p.q.Read(p.ctx)
		if err != nil {
			return // closed
		}
		batch := []diskqueue.Record{first}
		now, cancel := context.WithCancel(p.ctx)
		cancel() // read what is ready, without waiting
		for len(batch) < p.opts.BatchSize {
			rec, err := p.q.Read(now)
			if err != nil {
				break
			}
			batch = append(batch, rec)
		}
		bodies := make([][]byte, len(batch))
		for i, r := range batch {
			bodies[i] = r.Body
		}
		for {
			if err = p.publish(bodies); err == nil {
				break
			}
			p.forwardErrors.Add(1)
			// A fresh producer for the next try: go-nsq v1.1.0's Producer
			// races with itself when it reconnects after a failed
			// connection (its router goroutine still reads what connect
			// rewrites), which the race detector reports.
			p.prod.Stop()
			if prod, perr := newProducer(p.opts); perr == nil {
				p.prod = prod
			}
			if !failing {
				p.log.Warn("nsqbridge: cannot forward to nsqd; keeping messages locally", "pending", p.q.Depth(), "err", err)
				failing = true
			}
			select {
			case <-time.After(p.opts.RetryInterval):
			case <-p.ctx.Done():
				return // the batch stays in the local queue
			}
		}
		if failing {
			p.reconnects.Add(1)
			p.log.Info("nsqbridge: forwarding again", "pending", p.q.Depth())
			failing = false
		}
		for _, r := range batch {
			p.q.Ack(r.Seq)
		}
		p.forwarded.Add(int64(len(batch)))
		p.progress.Notify()
	}
}

func (p *Publisher) publish(bodies [][]byte) error {
	if len(bodies) == 1 {
		return p.prod.Publish(p.opts.Topic, bodies[0])
	}
	return p.prod.MultiPublish(p.opts.Topic, bodies)
}

// PublisherStats counts what a publisher has done since it opened.
type PublisherStats struct {
	Forwarded     int64 // messages nsqd acknowledged
	Pending       int64 // messages in the local queue, not yet acknowledged by nsqd
	ForwardErrors int64 // failed forward attempts
	Reconnects    int64 // times forwarding resumed after failing
	Local         diskqueue.Stats
}

// Stats returns the publisher's counters and its local queue's Stats.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Forwarded:     p.forwarded.Load(),
		Pending:       p.q.Depth(),
		ForwardErrors: p.forwardErrors.Load(),
		Reconnects:    p.reconnects.Load(),
		Local:         p.q.Stats(),
	}
}

// Sync waits until everything published so far is forwarded and
// acknowledged by nsqd, or ctx ends.
func (p *Publisher) Sync(ctx context.Context) error {
	for {
		wait := p.progress.Wait()
		if p.q.Depth() == 0 {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("nsqbridge: %d messages not yet forwarded: %w", p.q.Depth(), ctx.Err())
		case <-p.done:
			return diskqueue.ErrClosed
		}
	}
}

// Close stops forwarding and closes the local queue. Messages not yet
// forwarded stay in it and go first when the publisher is opened again.
func (p *Publisher) Close() error {
	err := diskqueue.ErrClosed
	p.once.Do(func() {
		p.cancel()
		<-p.done
		p.prod.Stop()
		err = p.q.Close()
	})
	return err
}
