package nsqbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/diskqueue"
)

// item is one local record and its decoded envelope.
type item struct {
	rec diskqueue.Record
	env envelope
}

// batch is what one node sends in one command: MPUB of several messages for
// one topic, PUB of one, or DPUB of one deferred message. Owned by the
// goroutine holding it: the reader until it is handed over, then the node
// sending it, or the retry list.
type batch struct {
	topic    string
	items    []item
	bytes    int    // MPUB body size: 4, plus 4 and the body per message
	failedOn string // the node whose send of it failed last; "" if none
}

// errAborted is a send abandoned by Close after CloseTimeout.
var errAborted = errors.New("nsqbridge: send abandoned by Close")

// readLocal reads the local queue in order and cuts it into batches for the
// node goroutines. It reads ahead only as far as the batch it is handing
// over and the first record of the next.
func (p *Publisher) readLocal() {
	defer p.wg.Done()
	// ready makes Read return only records that are ready, without waiting.
	ready, cancel := context.WithCancel(context.Background())
	cancel()
	var next *item // read, and not part of the batch before it
	for {
		first := next
		next = nil
		if first == nil {
			first = p.readOne(p.ctx)
			if first == nil {
				return // closed
			}
		}
		b := p.startBatch(*first)
		if b == nil {
			continue // dead-lettered
		}
		for len(b.items) < p.opts.BatchSize && b.items[0].env.due == 0 {
			it := p.readOne(ready)
			if it == nil {
				break
			}
			if it.env.due != 0 || string(it.env.topic) != b.topic || b.bytes+4+len(it.env.body) > p.opts.MaxBatchBytes {
				next = it // startBatch checks it whole
				break
			}
			// Its topic is the batch's, checked when the batch started.
			if err := p.checkBody(it.env.body); err != nil {
				p.badRecord(*it, err)
				continue
			}
			b.add(*it)
		}
		select {
		case p.batchCh <- b:
		case <-p.ctx.Done():
			return // b stays unacknowledged in the local queue
		}
	}
}

// readOne returns the next local record, or nil when ctx ends or the queue
// closes. It retries I/O errors every RetryInterval.
func (p *Publisher) readOne(ctx context.Context) *item {
	for {
		rec, err := p.q.Read(ctx)
		if err == nil {
			p.pending.add(rec.Seq, rec.Time)
			it := &item{rec: rec}
			if it.env, err = decodeEnvelope(rec.Body); err != nil {
				p.badRecord(*it, err)
				continue
			}
			return it
		}
		if ctx.Err() != nil || errors.Is(err, diskqueue.ErrClosed) {
			return nil
		}
		p.log.Warn("nsqbridge: reading the local queue", "err", err)
		if !sleep(p.ctx, p.opts.RetryInterval) {
			return nil
		}
	}
}

// startBatch returns a batch holding it, or nil if it went to DeadLetter.
func (p *Publisher) startBatch(it item) *batch {
	if !p.admit(it) {
		return nil
	}
	b := &batch{topic: string(it.env.topic), bytes: 4}
	if it.env.due == 0 {
		b.items = make([]item, 0, p.opts.BatchSize)
	}
	b.add(it)
	return b
}

func (b *batch) add(it item) {
	b.items = append(b.items, it)
	b.bytes += 4 + len(it.env.body)
}

// admit checks a record against the current limits; one that fails goes to
// DeadLetter, as nsqd would refuse it.
func (p *Publisher) admit(it item) bool {
	if err := p.check(string(it.env.topic), it.env.body); err != nil {
		p.badRecord(it, err)
		return false
	}
	return true
}

func (p *Publisher) badRecord(it item, reason error) {
	p.badRecords.Add(1)
	p.deadLetter(it, reason)
}

// deadLetter hands it to the DeadLetter handler and removes its record.
func (p *Publisher) deadLetter(it item, reason error) {
	m := Rejected{Topic: string(it.env.topic), Body: it.env.body, Published: it.rec.Time, Seq: it.rec.Seq}
	if it.env.due != 0 {
		m.Due = time.Unix(0, it.env.due)
	}
	if m.Body == nil {
		m.Body = it.rec.Body // a record that did not decode
	}
	if p.opts.DeadLetter != nil {
		p.opts.DeadLetter(m, reason)
	} else {
		p.log.Warn("nsqbridge: dropping a message (set PublisherOptions.DeadLetter to keep them)",
			"seq", it.rec.Seq, "topic", m.Topic, "bytes", len(m.Body), "reason", reason)
	}
	p.ack(it)
}

// ack removes delivered records from the local queue.
func (p *Publisher) ack(items ...item) {
	for _, it := range items {
		if err := p.q.Ack(it.rec.Seq); err != nil {
			// Only a bug gets here: each record is acknowledged once, by
			// whoever holds its batch.
			p.log.Error("nsqbridge: acknowledging a local record", "seq", it.rec.Seq, "err", err)
		}
		p.pending.remove(it.rec.Seq)
	}
	p.progress.Notify()
}

// pushRetry puts batches at the front of the retry list, in order, and wakes
// a node to take them.
func (p *Publisher) pushRetry(bs ...*batch) {
	p.retryMu.Lock()
	p.retry = slices.Concat(bs, p.retry)
	p.retryMu.Unlock()
	p.retried.Notify()
}

func (p *Publisher) popRetry() *batch {
	p.retryMu.Lock()
	defer p.retryMu.Unlock()
	if len(p.retry) == 0 {
		return nil
	}
	b := p.retry[0]
	p.retry = p.retry[1:]
	return b
}

// nextBatch returns the next batch to send, a retry first; nil when ctx
// ends.
func (p *Publisher) nextBatch(ctx context.Context) *batch {
	for {
		if b := p.popRetry(); b != nil {
			return b
		}
		wait := p.retried.Wait()
		if b := p.popRetry(); b != nil {
			return b
		}
		select {
		case b := <-p.batchCh:
			if ctx.Err() != nil {
				// Closing: taken but not sent, it stays in the local queue.
				// A node that was only removed gives it to the others.
				if p.ctx.Err() == nil {
					p.pushRetry(b)
				}
				return nil
			}
			return b
		case <-wait:
		case <-ctx.Done():
			return nil
		}
	}
}

// node is one nsqd the publisher sends to, served by one goroutine
// (runNode), which alone touches prod and bodies.
type node struct {
	addr   string
	static bool // from Options.NSQD: never removed by discovery
	ctx    context.Context
	cancel context.CancelFunc
	prod   *nsq.Producer
	bodies [][]byte // send's MPUB argument, reused

	connected         atomic.Bool
	forwarded, errors atomic.Int64
}

// addNodeLocked starts a node goroutine for addr; p.nodesMu is held.
func (p *Publisher) addNodeLocked(addr string, static bool) {
	if n, ok := p.nodes[addr]; ok {
		n.static = n.static || static
		return
	}
	n := &node{addr: addr, static: static}
	n.ctx, n.cancel = context.WithCancel(p.ctx)
	p.nodes[addr] = n
	p.wg.Add(1)
	go p.runNode(n)
}

// runNode connects to one nsqd and sends it batches, one at a time, until
// the publisher closes or discovery drops the node.
func (p *Publisher) runNode(n *node) {
	defer p.wg.Done()
	defer func() {
		n.connected.Store(false)
		if n.prod != nil {
			n.prod.Stop()
		}
	}()
	log := p.log.With("nsqd", n.addr)
	down := false     // the last connect or send failed
	reported := false // the current outage was logged
	everUp := false
	for n.ctx.Err() == nil {
		if !n.connected.Load() {
			if err := n.connect(p.opts.NSQConfig); err != nil {
				p.connectErrors.Add(1)
				n.errors.Add(1)
				down = true
				if !reported {
					log.Warn("nsqbridge: cannot connect to nsqd; keeping messages locally", "pending", p.q.Depth(), "err", err)
					reported = true
				}
				if !sleep(n.ctx, p.opts.RetryInterval) {
					return
				}
				continue
			}
			n.connected.Store(true)
			if down && everUp {
				p.reconnects.Add(1)
			}
			if reported {
				log.Info("nsqbridge: forwarding again", "pending", p.q.Depth())
			}
			down, reported, everUp = false, false, true
		}
		b := p.nextBatch(n.ctx)
		if b == nil {
			return
		}
		err := n.send(b, p.abortCh)
		var refusal nsq.ErrProtocol
		switch {
		case err == nil:
			k := int64(len(b.items))
			n.forwarded.Add(k)
			p.forwarded.Add(k)
			if b.failedOn != "" && b.failedOn != n.addr {
				p.failovers.Add(1)
			}
			p.ack(b.items...)
		case errors.Is(err, errAborted):
			return // Close gave up; the records stay in the local queue
		case errors.As(err, &refusal) && refused(refusal):
			// nsqd closes the connection after such an error: connect
			// again, without calling it an outage.
			n.connected.Store(false)
			if len(b.items) > 1 {
				// Which message? Each goes again on its own.
				p.pushRetry(b.split()...)
				continue
			}
			p.refused.Add(1)
			p.deadLetter(b.items[0], fmt.Errorf("%w: nsqd %s: %s", ErrRefused, n.addr, refusal.Reason))
		default:
			p.sendErrors.Add(1)
			n.errors.Add(1)
			n.connected.Store(false)
			down = true
			if !reported {
				log.Warn("nsqbridge: cannot forward to nsqd; keeping messages locally", "pending", p.q.Depth(), "err", err)
				reported = true
			}
			b.failedOn = n.addr
			p.pushRetry(b)
			if !sleep(n.ctx, p.opts.RetryInterval) {
				return
			}
		}
	}
}

// refused reports whether nsqd's error refuses the message itself, so that
// sending it again cannot succeed: a bad body, size, topic or delay.
// Anything else (E_PUB_FAILED while a topic is closing, authorisation
// errors) is treated as an outage and sent again.
func refused(e nsq.ErrProtocol) bool {
	code, _, _ := strings.Cut(e.Reason, " ")
	switch code {
	case "E_BAD_MESSAGE", "E_BAD_BODY", "E_BAD_TOPIC", "E_INVALID":
		return true
	}
	return false
}

// split turns a batch into batches of one message each.
func (b *batch) split() []*batch {
	out := make([]*batch, len(b.items))
	for i, it := range b.items {
		out[i] = &batch{topic: b.topic, items: []item{it}, bytes: 8 + len(it.env.body), failedOn: b.failedOn}
	}
	return out
}

// connect makes a fresh producer and connects it. A fresh one each time:
// go-nsq v1.1.0's Producer races with itself when it reconnects after a
// failed connection (its router goroutine still reads what connect
// rewrites), which the race detector reports.
//
// It gives up when the node's context ends (Close, or discovery dropping
// the node): go-nsq waits for nsqd's answer to IDENTIFY for up to the
// config's ReadTimeout (a minute by default), holding a lock that Stop
// waits for too, so an nsqd that accepted the connection and froze would
// hold Close that long. Nothing was sent on the connection, so nothing is
// lost by leaving it: the producer is stopped once that wait ends, by a
// goroutine that outlives the node for as long.
func (n *node) connect(cfg *nsq.Config) error {
	if n.prod != nil {
		n.prod.Stop()
		n.prod = nil
	}
	prod, err := newProducer(n.addr, cfg)
	if err != nil {
		return err
	}
	pinged := make(chan error, 1)
	go func() { pinged <- prod.Ping() }()
	select {
	case err := <-pinged:
		n.prod = prod
		return err
	case <-n.ctx.Done():
		go func() {
			<-pinged
			prod.Stop()
		}()
		return n.ctx.Err()
	}
}

// send publishes b and waits for nsqd's answer, or until abort closes.
func (n *node) send(b *batch, abort <-chan struct{}) error {
	done := make(chan *nsq.ProducerTransaction, 1)
	var err error
	if len(b.items) == 1 {
		it := b.items[0]
		if d := it.env.delay(time.Now()); d > 0 {
			err = n.prod.DeferredPublishAsync(b.topic, d, it.env.body, done)
		} else {
			err = n.prod.PublishAsync(b.topic, it.env.body, done)
		}
	} else {
		n.bodies = n.bodies[:0]
		for _, it := range b.items {
			n.bodies = append(n.bodies, it.env.body)
		}
		err = n.prod.MultiPublishAsync(b.topic, n.bodies, done)
		clear(n.bodies) // go-nsq copied them into its command
	}
	if err != nil {
		return err
	}
	select {
	case t := <-done:
		return t.Error
	case <-abort:
		n.prod.Stop() // fails the transaction into done, which has room
		return errAborted
	}
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pendingList is the records the reader has read and nobody acknowledged
// yet, in seq order, for the age of the oldest. Safe for concurrent use.
type pendingList struct {
	mu   sync.Mutex
	recs []pendingRecord // ascending seq; acknowledged ones leave from the front
}

type pendingRecord struct {
	seq   uint64
	time  int64 // Unix ns the record was put
	acked bool
}

func (l *pendingList) add(seq uint64, t time.Time) {
	l.mu.Lock()
	l.recs = append(l.recs, pendingRecord{seq: seq, time: t.UnixNano()})
	l.mu.Unlock()
}

func (l *pendingList) remove(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.recs), func(i int) bool { return l.recs[i].seq >= seq })
	if i < len(l.recs) && l.recs[i].seq == seq {
		l.recs[i].acked = true
	}
	for len(l.recs) > 0 && l.recs[0].acked {
		l.recs = l.recs[1:]
	}
}

// oldest returns the seq of the oldest record not acknowledged; ok is false
// if there is none.
func (l *pendingList) oldest() (seq uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recs) == 0 {
		return 0, false
	}
	return l.recs[0].seq, true
}

// oldestAge is now minus the put time of the oldest record not acknowledged.
func (l *pendingList) oldestAge(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recs) == 0 {
		return 0
	}
	return max(0, time.Duration(now.UnixNano()-l.recs[0].time))
}
