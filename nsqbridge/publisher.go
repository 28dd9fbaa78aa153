package nsqbridge

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/broadcast"
)

// PublisherOptions configures [OpenPublisher]. Every zero value means the
// default named on its field.
type PublisherOptions struct {
	// NSQD lists the TCP addresses (host:port) of nsqd nodes to publish to.
	// Lookupd lists nsqlookupd HTTP addresses ("host:4161" or a URL),
	// polled for the nsqd nodes registered with them. At least one address
	// is required; with both, the nodes are the union.
	NSQD, Lookupd []string
	// LookupdPollInterval is how often nsqlookupd is asked for nodes. Zero
	// means 15 s.
	LookupdPollInterval time.Duration

	// Topic is the nsqd topic [Publisher.Publish] uses. It may be empty if
	// only PublishTo and DeferredPublish are used.
	Topic string

	// MaxMsgSize is the largest body Publish accepts, as nsqd's
	// --max-msg-size. Zero means 1 MiB (nsqd's default). Set it to the
	// nsqd nodes' value: a larger message that nsqd still refuses goes to
	// DeadLetter.
	MaxMsgSize int
	// MaxDelay is the longest delay DeferredPublish accepts, as nsqd's
	// --max-req-timeout. Zero means 1 hour (nsqd's default).
	MaxDelay time.Duration

	// BatchSize is the most messages forwarded in one MPUB. Zero means 100.
	BatchSize int
	// MaxBatchBytes bounds an MPUB body (4 bytes, plus 4 and the body for
	// each message), as nsqd's --max-body-size. Zero means 5 MiB (nsqd's
	// default). A message larger than this on its own goes alone, as PUB.
	MaxBatchBytes int

	// RetryInterval is how long a node's forwarder waits after the node
	// failed before it connects again. Zero means 500 ms.
	RetryInterval time.Duration
	// CloseTimeout is how long Close waits for nsqd to acknowledge the
	// batches already sent; after it, their records stay in the local
	// queue and are sent again after the next Open. Zero means 5 s.
	CloseTimeout time.Duration

	// DeadLetter receives each message the publisher gives up on: one nsqd
	// refused on its own (reason wraps [ErrRefused] and nsqd's error), or a
	// local record that is not a publisher message ([ErrBadEnvelope]) or
	// fails Publish's checks under the current options. Its record is then
	// removed from the local queue and forwarding goes on. It runs on a
	// forwarding goroutine and must not block for long, nor call Close
	// (which waits for that goroutine). Nil logs the message at Warn and
	// drops it; Stats counts it either way.
	DeadLetter func(m Rejected, reason error)

	// Disk configures the local store-and-forward queue; its zero value is
	// diskqueue's defaults, except that a zero Disk.MaxRecordBytes is set
	// to fit MaxMsgSize and the envelope. Set Disk.SyncEvery to 1 for
	// Publish to return only once the message is on stable storage
	// locally.
	Disk diskqueue.Options
	// NSQConfig configures the go-nsq producers. Nil means nsq.NewConfig().
	NSQConfig *nsq.Config
	// Logger receives forwarding errors (once per outage of a node),
	// recoveries and dead letters. Nil discards.
	Logger *slog.Logger
}

// Defaults documented on the PublisherOptions fields.
const (
	DefaultMaxMsgSize          = 1 << 20
	DefaultMaxDelay            = time.Hour
	DefaultBatchSize           = 100
	DefaultMaxBatchBytes       = 5 << 20
	DefaultRetryInterval       = 500 * time.Millisecond
	DefaultCloseTimeout        = 5 * time.Second
	DefaultLookupdPollInterval = 15 * time.Second
)

func (o PublisherOptions) withDefaults() (PublisherOptions, error) {
	if len(o.NSQD)+len(o.Lookupd) == 0 {
		return o, fmt.Errorf("%w: an NSQD or Lookupd address is required", ErrInvalidOptions)
	}
	if o.Topic != "" && !validTopic(o.Topic) {
		return o, fmt.Errorf("%w: %w %q", ErrInvalidOptions, ErrInvalidTopic, o.Topic)
	}
	if o.MaxMsgSize < 0 || o.MaxDelay < 0 || o.BatchSize < 0 || o.MaxBatchBytes < 0 ||
		o.RetryInterval < 0 || o.CloseTimeout < 0 || o.LookupdPollInterval < 0 {
		return o, fmt.Errorf("%w: negative size, count or duration", ErrInvalidOptions)
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDuration := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&o.MaxMsgSize, DefaultMaxMsgSize)
	set(&o.BatchSize, DefaultBatchSize)
	set(&o.MaxBatchBytes, DefaultMaxBatchBytes)
	setDuration(&o.MaxDelay, DefaultMaxDelay)
	setDuration(&o.RetryInterval, DefaultRetryInterval)
	setDuration(&o.CloseTimeout, DefaultCloseTimeout)
	setDuration(&o.LookupdPollInterval, DefaultLookupdPollInterval)
	need := o.MaxMsgSize + maxEnvelopeOverhead
	if o.Disk.MaxRecordBytes == 0 {
		o.Disk.MaxRecordBytes = max(need, diskqueue.DefaultMaxRecordBytes)
	} else if o.Disk.MaxRecordBytes < need {
		return o, fmt.Errorf("%w: Disk.MaxRecordBytes %d is below MaxMsgSize %d plus the %d-byte envelope",
			ErrInvalidOptions, o.Disk.MaxRecordBytes, o.MaxMsgSize, maxEnvelopeOverhead)
	}
	if o.NSQConfig == nil {
		o.NSQConfig = nsq.NewConfig()
	}
	if err := o.NSQConfig.Validate(); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.NSQD = slices.Clone(o.NSQD)
	o.Lookupd = slices.Clone(o.Lookupd)
	return o, nil
}

// Rejected is a message a [Publisher] gave up on, as its DeadLetter
// handler receives it.
type Rejected struct {
	Topic string
	Body  []byte // belongs to the handler
	// Due is when a deferred publish was to be delivered; zero for a plain
	// one.
	Due time.Time
	// Published is when Publish stored the message locally.
	Published time.Time
	// Seq is its record's sequence number in the local queue.
	Seq uint64
}

// Publisher publishes to nsqd through a local disk queue. It is safe for
// concurrent use.
//
// A message is stored locally by Publish, then forwarded by the publisher's
// goroutines: one reads the local queue in order and cuts it into batches
// (consecutive messages for the same topic, at most BatchSize and
// MaxBatchBytes; a deferred message alone), and one per nsqd node takes the
// next batch whenever its last one was acknowledged, so batches spread over
// the healthy nodes by how fast each acknowledges. A local record is
// acknowledged, and so removed, only after nsqd acknowledged it or it went
// to DeadLetter.
//
// Order: with one node, messages reach nsqd in the order they were
// published (for one producer goroutine; concurrent Publish calls are
// ordered by when the local queue took them). With several nodes, each
// node receives its batches in publish order, but batches on different
// nodes race, as nsqd itself promises no order across nodes. A batch whose
// send failed is sent again first, by the next node free (the same node if
// it is the only one), so on another node it can arrive after later
// messages. Delivery is at least once: a batch whose acknowledgement was
// lost is sent again.
type Publisher struct {
	opts PublisherOptions
	q    *diskqueue.Queue
	log  *slog.Logger

	ctx     context.Context // ended by Close: stop reading and taking batches
	cancel  context.CancelFunc
	abortCh chan struct{} // closed by Close after CloseTimeout: stop waiting for nsqd
	wg      sync.WaitGroup
	once    sync.Once
	closed  atomic.Bool

	// batchCh hands batches from the reader goroutine to node goroutines;
	// unbuffered, so at most one batch is cut ahead of the nodes.
	batchCh chan *batch

	// retryMu guards retry: batches to send again, oldest first. Node
	// goroutines take from it before batchCh.
	retryMu sync.Mutex
	retry   []*batch
	retried broadcast.Broadcast // a batch was added to retry

	// nodesMu guards nodes: the node goroutines running, by address. The
	// lookupd goroutine adds and removes discovered ones.
	nodesMu sync.Mutex
	nodes   map[string]*node

	pending  pendingList         // records read and not yet acknowledged locally
	progress broadcast.Broadcast // local records were acknowledged

	// refused and badRecords are the two ways to DeadLetter; their sum is
	// DeadLetters.
	published, forwarded, invalid, refused, badRecords              atomic.Int64
	sendErrors, connectErrors, lookupdErrors, reconnects, failovers atomic.Int64
}

// OpenPublisher opens (or creates) the local queue in dir and starts
// forwarding it to nsqd, backlog first. With Options.Lookupd it asks
// nsqlookupd for nodes once before it returns, waiting at most
// min(LookupdPollInterval, 5 s) for each address; nodes it cannot reach
// are not waited for.
func OpenPublisher(dir string, o PublisherOptions) (*Publisher, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	q, err := diskqueue.Open(dir, o.Disk)
	if err != nil {
		return nil, fmt.Errorf("nsqbridge: %w", err)
	}
	p := &Publisher{
		opts:    o,
		q:       q,
		log:     o.Logger.With("dir", dir),
		abortCh: make(chan struct{}),
		batchCh: make(chan *batch),
		nodes:   map[string]*node{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.nodesMu.Lock()
	for _, addr := range o.NSQD {
		p.addNodeLocked(addr, true)
	}
	p.nodesMu.Unlock()
	p.wg.Add(1)
	go p.readLocal()
	if len(o.Lookupd) > 0 {
		client := &http.Client{Timeout: min(o.LookupdPollInterval, 5*time.Second)}
		p.pollLookupd(client) // the nodes known now are used from the start
		p.wg.Add(1)
		go p.discover(client)
	}
	return p, nil
}

func newProducer(addr string, cfg *nsq.Config) (*nsq.Producer, error) {
	prod, err := nsq.NewProducer(addr, cfg)
	if err != nil {
		return nil, err
	}
	prod.SetLogger(log.New(discard{}, "", 0), nsq.LogLevelError)
	return prod, nil
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// Publish stores body in the local queue for Options.Topic; the publisher
// forwards it to nsqd. It returns once the local queue has it (durably,
// with Disk.SyncEvery 1), whether or not nsqd is reachable. A body nsqd
// would refuse is not stored: Publish returns [ErrEmptyMessage] or
// [ErrMessageTooLarge] (and [ErrInvalidTopic] if Options.Topic is empty).
// Publish does not keep body.
//
// With Disk.SyncEvery 1, a ctx that has ended stores nothing, and one that
// ends while Publish waits for the fsync returns an error wrapping
// diskqueue.ErrNotDurable: the message is stored and will be forwarded
// (publishing it again sends it twice), but a power cut before the next
// fsync may lose it. Any other error means it was not stored.
func (p *Publisher) Publish(ctx context.Context, body []byte) error {
	return p.put(ctx, p.opts.Topic, 0, body)
}

// PublishTo is [Publisher.Publish] to the given topic, which travels with
// the message through the local queue.
func (p *Publisher) PublishTo(ctx context.Context, topic string, body []byte) error {
	return p.put(ctx, topic, 0, body)
}

// DeferredPublish is [Publisher.PublishTo] for a message nsqd is to
// deliver no earlier than delay from now (nsqd's DPUB). The due time is
// fixed when DeferredPublish is called and kept in the local queue, so
// time spent there counts towards the delay: a message forwarded after it
// is due goes as a plain PUB. A delay over MaxDelay returns
// [ErrInvalidDelay]; zero is a plain publish.
func (p *Publisher) DeferredPublish(ctx context.Context, topic string, delay time.Duration, body []byte) error {
	if delay < 0 || delay > p.opts.MaxDelay {
		p.invalid.Add(1)
		return fmt.Errorf("%w: %v, limit %v", ErrInvalidDelay, delay, p.opts.MaxDelay)
	}
	return p.put(ctx, topic, delay, body)
}

// bufPool holds envelope buffers for put, so Publish does not allocate.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

func (p *Publisher) put(ctx context.Context, topic string, delay time.Duration, body []byte) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if err := p.check(topic, body); err != nil {
		p.invalid.Add(1)
		return err
	}
	var due int64
	if delay > 0 {
		due = time.Now().Add(delay).UnixNano()
	}
	buf := bufPool.Get().(*[]byte)
	rec := appendEnvelope((*buf)[:0], topic, due, body)
	err := p.q.Put(ctx, rec)
	if cap(rec) <= 64<<10 {
		*buf = rec[:0]
		bufPool.Put(buf)
	}
	if errors.Is(err, diskqueue.ErrNotDurable) {
		p.published.Add(1) // stored: it will be forwarded
		return fmt.Errorf("nsqbridge: publish: %w", err)
	}
	if err != nil {
		if errors.Is(err, diskqueue.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("nsqbridge: publish: %w", err)
	}
	p.published.Add(1)
	return nil
}

// check applies nsqd's limits, as configured, to a message.
func (p *Publisher) check(topic string, body []byte) error {
	if !validTopic(topic) {
		return fmt.Errorf("%w: %q", ErrInvalidTopic, topic)
	}
	return p.checkBody(body)
}

// checkBody is check's half about the body.
func (p *Publisher) checkBody(body []byte) error {
	if len(body) == 0 {
		return ErrEmptyMessage
	}
	if len(body) > p.opts.MaxMsgSize {
		return fmt.Errorf("%w: %d bytes, MaxMsgSize %d", ErrMessageTooLarge, len(body), p.opts.MaxMsgSize)
	}
	return nil
}

// Sync waits until every message published before the call was
// acknowledged by nsqd (or handed to DeadLetter), or ctx ends, while
// publishing may go on. It does not wait for messages published after it
// was called.
func (p *Publisher) Sync(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	// Every Publish that returned before now has a seq below WriteSeq; the
	// local read cursor passes it once each of them was acknowledged. While
	// the forwarder holds records, the oldest of them is where the cursor
	// is (or just behind it), read without Stats' cost on every batch.
	target := p.q.Stats().WriteSeq
	for {
		wait := p.progress.Wait()
		done, ok := p.pending.oldest()
		if !ok {
			done = p.q.Stats().ReadSeq // nothing held: the cursor says
		}
		if done >= target {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("nsqbridge: sync: %d earlier messages not yet acknowledged by nsqd: %w", target-done, ctx.Err())
		case <-p.ctx.Done():
			return ErrClosed
		}
	}
}

// Close stops forwarding and closes the local queue. It waits for the
// batches already sent (at most one per node) to be acknowledged, up to
// CloseTimeout, and sends nothing more. Everything not yet acknowledged
// stays in the local queue and is forwarded first when a publisher opens
// the directory again; Close logs how many, and Stats().Pending still
// reports it after Close. A connection still being made is given up at
// once (its go-nsq producer is stopped in the background once nsqd
// answers or go-nsq's ReadTimeout passes). A second Close returns
// ErrClosed.
func (p *Publisher) Close() error {
	err := ErrClosed
	p.once.Do(func() {
		p.closed.Store(true)
		p.cancel()
		done := make(chan struct{})
		go func() {
			p.wg.Wait()
			close(done)
		}()
		timer := time.NewTimer(p.opts.CloseTimeout)
		select {
		case <-done:
		case <-timer.C:
			close(p.abortCh)
			<-done
		}
		timer.Stop()
		err = p.q.Close()
		if n := p.q.Depth(); n > 0 {
			p.log.Info("nsqbridge: closed; messages wait in the local queue for the next start", "pending", n)
		}
	})
	return err
}

// PublisherStats counts what a publisher has done since it opened.
type PublisherStats struct {
	Published int64 // messages accepted by Publish, PublishTo and DeferredPublish
	Forwarded int64 // messages nsqd acknowledged
	// Pending is the messages in the local queue that nsqd has not yet
	// acknowledged (nor DeadLetter taken), the backlog from before Open
	// included.
	Pending int64
	// OldestPending is the age of the oldest of them the forwarder has
	// read (it reads at most one batch ahead of the nodes); zero when none.
	OldestPending time.Duration

	Invalid     int64 // messages Publish refused by its checks (never stored)
	DeadLetters int64 // messages handed to DeadLetter (or logged and dropped)
	Refused     int64 // of DeadLetters, refused by nsqd
	BadRecords  int64 // of DeadLetters, local records that did not decode or pass the checks

	SendErrors    int64 // sends that failed for want of nsqd (lost connection, timeout, nsqd error other than a refusal); the batch is sent again
	ConnectErrors int64 // failed connection attempts to an nsqd node
	LookupdErrors int64 // failed queries of an nsqlookupd
	Reconnects    int64 // times a node that had failed was connected again
	Failovers     int64 // batches that failed on one node and were then acknowledged by another

	ConnectedNodes int         // nodes connected now
	Nodes          []NodeStats // every node known now, by address
	Local          diskqueue.Stats
}

// NodeStats describes one nsqd node a publisher sends to.
type NodeStats struct {
	Addr       string
	Discovered bool  // found through nsqlookupd (not in Options.NSQD)
	Connected  bool  // connected, and its last send did not fail
	Forwarded  int64 // messages it acknowledged
	Errors     int64 // failed connection attempts and sends
}

// Stats returns the publisher's counters and its local queue's Stats.
func (p *Publisher) Stats() PublisherStats {
	st := PublisherStats{
		Published:     p.published.Load(),
		Forwarded:     p.forwarded.Load(),
		OldestPending: p.pending.oldestAge(time.Now()),
		Invalid:       p.invalid.Load(),
		Refused:       p.refused.Load(),
		BadRecords:    p.badRecords.Load(),
		SendErrors:    p.sendErrors.Load(),
		ConnectErrors: p.connectErrors.Load(),
		LookupdErrors: p.lookupdErrors.Load(),
		Reconnects:    p.reconnects.Load(),
		Failovers:     p.failovers.Load(),
		Local:         p.q.Stats(),
	}
	st.Pending = st.Local.Depth // one snapshot, so the two agree
	st.DeadLetters = st.Refused + st.BadRecords
	p.nodesMu.Lock()
	for _, n := range p.nodes {
		ns := NodeStats{Addr: n.addr, Discovered: !n.static, Connected: n.connected.Load(), Forwarded: n.forwarded.Load(), Errors: n.errors.Load()}
		if ns.Connected {
			st.ConnectedNodes++
		}
		st.Nodes = append(st.Nodes, ns)
	}
	p.nodesMu.Unlock()
	slices.SortFunc(st.Nodes, func(a, b NodeStats) int { return strings.Compare(a.Addr, b.Addr) })
	return st
}
