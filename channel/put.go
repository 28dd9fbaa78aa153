package channel

// The source side of a channel: Put and the spill rule (memory buffer
// first, the backend once it is full or holds anything), as fanout.go is
// for a topic's channels and pump.go for reading the backend back. What
// happens to a message once a consumer can take it (in flight, requeue,
// timeouts, deferral) is receive.go, answer.go, flight.go, clock.go and
// timers.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// PutOptions are the per-message settings of [Channel.PutWith].
type PutOptions struct {
	// Delay defers delivery: the message is delivered no earlier than Delay
	// after Put. The due time is stored with the message, so it survives
	// Close and a restart. Zero or negative means no delay.
	Delay time.Duration
	// Expires, if not zero, is when an undelivered message stops being
	// worth delivering: it goes to the dead-letter handler instead.
	Expires time.Time
	// Key, if not empty, is the message's key, up to MaxKeyBytes: stored
	// with it (counting toward the record limit with the body), handed to
	// consumers as Message.Key, and what the channel's key policy
	// (Options.Keys) goes by.
	Key []byte
}

// Put queues body for delivery. The channel takes ownership of body: do not
// change it after Put returns.
//
// While the memory buffer has room and nothing is waiting in the backend,
// the message goes to memory; otherwise it goes to the backend, so that
// consumers see messages in put order. Put blocks, honouring ctx, only when
// there is no room anywhere: the memory buffer is full with no backend
// (unless FailWhenFull), or the backend blocks. An error means the
// message was not stored, unless it wraps [ErrNotDurable]: stored, and
// delivered, but the backend's Put stopped waiting for it to be durable.
//
// A Put made for a request (an HTTP handler's) should not pass the
// request's context: a client that goes away cancels it, and a Put that
// may already have stored the message then returns ErrNotDurable or the
// context's error. Pass a context of the service's own, such as
// context.WithoutCancel(r.Context()) with a timeout.
func (c *Channel) Put(ctx context.Context, body []byte) error {
	_, err := c.Enqueue(ctx, body, PutOptions{})
	return err
}

// PutWith is Put with a delay or an expiry.
//
// A body larger or smaller than the backend can store is refused with
// [ErrTooLarge] or [ErrTooSmall] (the Backend's [Log] record limits), wherever it would
// have gone first.
func (c *Channel) PutWith(ctx context.Context, body []byte, po PutOptions) error {
	_, err := c.Enqueue(ctx, body, po)
	return err
}

// Receipt says what became of a message a Put stored: [Channel.Enqueue]
// and the topics' Enqueue return it.
type Receipt struct {
	// ID is the message's: the one [Message].ID carries when it is
	// delivered. Under DuplicatesOK, a Put refused as a duplicate gives
	// the ID of the message that holds the key (see Duplicate).
	ID ID
	// Seq is the message's record in the backend (a queue's) or the
	// topic's log, when Logged and its [Log] numbers its records
	// (spillq's queues and topics do). Otherwise 0, which is
	// also a record's seq: read it only when Logged.
	Seq uint64
	// Logged says the message's record went to the backend or the topic's
	// log. It is false for a message that went to the memory buffer (a
	// crash loses it; Close writes it to the backend) or, deferred, to
	// the timer store or the memory heap of deferred messages.
	Logged bool
	// Duplicate says the key policy refused the Put as a duplicate and
	// Options.DuplicatesOK (FanoutOptions.DuplicatesOK on a topic) made
	// it succeed: nothing was stored, and ID is the message that holds
	// the key (see [DuplicateError]).
	Duplicate bool
}

// Enqueue is PutWith returning a [Receipt]: the message's ID, and where its
// record went. The receipt is valid when the error is nil or wraps
// [ErrNotDurable] (the message was stored, not yet durable: a retry would
// store it again unless its key is taken, see ErrNotDurable); after any
// other error it is the zero Receipt. A Put its key policy refuses returns
// a [*DuplicateError], which names the message holding the key.
func (c *Channel) Enqueue(ctx context.Context, body []byte, po PutOptions) (Receipt, error) {
	if c.fan != nil {
		return Receipt{}, ErrTopicChannel
	}
	c.prod.putMu.RLock()
	defer c.prod.putMu.RUnlock()
	if c.isClosed.Load() {
		return Receipt{}, ErrClosed // before an ID is taken, so not counted
	}
	if len(po.Key) > MaxKeyBytes {
		return Receipt{}, fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(po.Key), MaxKeyBytes)
	}
	if len(po.Key) == 0 {
		po.Key = nil
	}
	if err := checkBody(body, po.Key, c.minBody, c.maxBody); err != nil {
		return Receipt{}, err
	}
	// KeySerial acts at delivery only: its Put is any other.
	keyed := po.Key != nil && c.keys != nil && c.opts.Keys != KeySerial
	if !keyed && po.Delay <= 0 && c.memCh != nil && c.diskPending.Load() == 0 {
		// The common case, a message for the memory buffer, is allocated
		// where it will live.
		m := new(Message)
		c.fill(m, body, po, true)
		id := m.ID // m is a consumer's once sent
		select {
		case c.memCh <- m:
			return Receipt{ID: id}, nil
		default:
		}
		logged, err := c.putFull(ctx, m)
		return receipt(id, m, logged, err)
	}
	// A value, not a pointer: a message bound for the backend is only
	// encoded, so it need not be allocated; kept() copies it to the heap
	// for the paths that hold on to it.
	var m Message
	// One bound for a diskqueue.Log takes its record's timestamp
	// (putDisk), which spares the Put a clock read, unless the key policy
	// or a due time goes by it first.
	c.fill(&m, body, po, keyed || c.disk == nil)
	if keyed {
		return c.putKeyed(ctx, &m)
	}
	logged, err := c.place(ctx, &m)
	return receipt(m.ID, &m, logged, err)
}

// receipt is the Receipt of message id, m the Put's own copy of it, which
// putBackend left the record's seq in when the backend told it.
func receipt(id ID, m *Message, logged bool, err error) (Receipt, error) {
	if !stored(err) {
		return Receipt{}, err
	}
	r := Receipt{ID: id, Logged: logged}
	if logged && m.src == srcBackend {
		r.Seq = m.seq
	}
	return r, err
}

// putKeyed is Enqueue of a message with a key under a key policy: the
// policy admits it first, and takes it back if it is not stored.
func (c *Channel) putKeyed(ctx context.Context, m *Message) (Receipt, error) {
	adm, err := c.keys.admit(m.Key, m.ID, m.Timestamp.UnixNano())
	if err != nil {
		c.prod.putFailures.Add(1) // not a Put: Stats.Duplicates counts it
		if dup, ok := err.(*DuplicateError); ok && c.opts.DuplicatesOK {
			return Receipt{ID: dup.ID, Duplicate: true}, nil
		}
		return Receipt{}, err
	}
	logged, err := c.place(ctx, m)
	if !stored(err) {
		c.keys.undo(m.ID, adm)
		return Receipt{}, err
	}
	// place left in m where the message went (putEnvelope the record's
	// seq, when it knows it).
	c.keys.commit(adm, m.ID, m.seq, m.src)
	return receipt(m.ID, m, logged, err)
}

// place puts m where it goes first: a deferred one in the timer store
// (putDeferred), unless its record must stay in the backend (pinsRecord);
// one due now in the memory buffer while it has room and nothing waits in
// the backend, else putFull. It reports whether m went to the backend
// (logged), as each of the put functions below does.
func (c *Channel) place(ctx context.Context, m *Message) (logged bool, err error) {
	switch {
	case m.due != 0:
		return c.putDeferred(ctx, m)
	case c.memCh != nil && c.diskPending.Load() == 0:
		c.stampOnce(m)
		select {
		case c.memCh <- m.kept():
			return false, nil
		default:
		}
	}
	return c.putFull(ctx, m)
}

// pinsRecord reports whether m's record must stay in the backend (or the
// topic's log) while m is pending, rather than move to the timer store
// when deferred: under KeyUnique and KeyReplace, a queue's or a topic's,
// the key state names a pending message by its record, and a restart (and
// on a topic, every Put) checks it against the acknowledgements.
func (c *Channel) pinsRecord(m *Message) bool {
	if m.Key == nil {
		return false
	}
	if c.fan != nil {
		return c.fan.pinsKeys()
	}
	return c.opts.Keys == KeyUnique || c.opts.Keys == KeyReplace
}

// toTimers reports whether m, deferred, may wait in the timer store: there
// is one, and m's record need not stay in the backend (pinsRecord).
func (c *Channel) toTimers(m *Message) bool { return c.timers != nil && !c.pinsRecord(m) }

// fill makes m a new message: the next ID, stamped now if stamp is set
// or it has a due time. One not stamped has the zero Timestamp until
// stampOnce, or putDisk, stamps it where it goes.
func (c *Channel) fill(m *Message, body []byte, po PutOptions, stamp bool) {
	*m = Message{ID: ID(c.prod.nextID.Add(1)), Body: body, Key: po.Key, ch: c, gen: c.gen.Load()}
	if stamp || po.Delay > 0 {
		m.Timestamp = c.stamp()
	}
	if po.Delay > 0 {
		m.due = unixNano(m.Timestamp.Add(po.Delay))
	}
	if !po.Expires.IsZero() {
		m.expires = unixNano(po.Expires)
	}
}

// putFull places a message that found no room in the memory buffer, or
// must go behind messages in the backend: the backend if there is one,
// else it waits for room (or fails, with FailWhenFull).
func (c *Channel) putFull(ctx context.Context, m *Message) (logged bool, err error) {
	if c.backend != nil {
		return c.putBackend(ctx, m)
	}
	if c.opts.FailWhenFull {
		c.prod.putFailures.Add(1)
		return false, ErrFull
	}
	// No backend, so fill stamped m: only a put to a diskqueue.Log waits
	// for its stamp.
	select {
	case c.memCh <- m.kept():
		return false, nil
	case <-ctx.Done():
		c.prod.putFailures.Add(1)
		return false, ctx.Err()
	case <-c.closeCh:
		c.prod.putFailures.Add(1)
		return false, ErrClosed
	}
}

// putDeferred stores a delayed message in the timer store or the backend
// when there is one, so its due time is durable, and in the memory heap
// otherwise. If the timer store fails, the message goes to the backend, as
// without one.
func (c *Channel) putDeferred(ctx context.Context, m *Message) (logged bool, err error) {
	if c.toTimers(m) {
		bctx, release := c.bound(ctx)
		seq, err := c.putTimer(bctx, m)
		release()
		if stored(err) {
			// m is the Put's own: where it went, for the key state.
			m.src, m.seq = srcTimers, seq
			return false, err
		}
		if ctx.Err() != nil || c.isClosed.Load() {
			c.prod.putFailures.Add(1)
			if c.isClosed.Load() {
				return false, ErrClosed
			}
			return false, ctx.Err()
		}
		c.log.Warn("channel: cannot store a deferred message in the timer store; putting it in the backend", "err", err)
	}
	if c.backend != nil {
		return c.putBackend(ctx, m)
	}
	c.mu.Lock()
	c.deferred.push(m.kept())
	c.mu.Unlock()
	c.wakeClock()
	return false, nil
}

// kept returns a heap copy of m, for a message the channel holds on to.
func (m Message) kept() *Message { return &m }

// stampOnce stamps m now, unless it is stamped already (see fill).
func (c *Channel) stampOnce(m *Message) {
	if m.Timestamp.IsZero() {
		m.Timestamp = c.stamp()
	}
}

// envelopes recycles the buffers messages are encoded into for the backend:
// Log.Put does not keep its argument.
var envelopes = sync.Pool{New: func() any { return new([]byte) }}

// pooledEnvelope returns m's envelope in a buffer of envelopes, which
// freeEnvelope gives back once the Put has returned.
func pooledEnvelope(m *Message) *[]byte {
	buf := envelopes.Get().(*[]byte)
	*buf = appendEnvelope((*buf)[:0], m)
	return buf
}

// freeEnvelope gives buf back to envelopes, unless an outsized body grew
// it: the pool would keep it alive for bodies that seldom need it.
func freeEnvelope(buf *[]byte) {
	if cap(*buf) <= 64<<10 {
		envelopes.Put(buf)
	}
}

func (c *Channel) putBackend(ctx context.Context, m *Message) (logged bool, err error) {
	c.diskPending.Add(1)
	if m.due != 0 {
		// Before the Put: the pump may read the record back at once.
		c.diskDeferred.put()
	}
	bctx, release := c.bound(ctx)
	if c.disk != nil {
		err = c.putDisk(bctx, m)
	} else {
		c.stampOnce(m)
		buf := pooledEnvelope(m)
		err = c.putEnvelope(bctx, m, *buf)
		freeEnvelope(buf)
	}
	release()
	if !stored(err) {
		c.delivered()
		if m.due != 0 {
			c.diskDeferred.unput()
		}
		c.prod.putFailures.Add(1)
		if c.isClosed.Load() && errors.Is(err, context.Canceled) {
			return false, ErrClosed
		}
		return false, fmt.Errorf("channel: put to backend: %w", err)
	}
	c.prod.spills.Add(1)
	if err != nil {
		return true, fmt.Errorf("channel: put to backend: %w", err)
	}
	return true, nil
}

// putEnvelope stores env, m's envelope, in the backend, and leaves in m
// the record it went to when the backend numbers its records: for the
// Put's Receipt, and for a keyed message the key policy's, which
// putKeyed's commit, or Close, tells it.
func (c *Channel) putEnvelope(ctx context.Context, m *Message, env []byte) error {
	if !c.numbered {
		return c.backend.Put(ctx, env)
	}
	seq, err := c.backend.PutSeq(ctx, env)
	if stored(err) {
		m.seq, m.src = seq, srcBackend
	}
	return err
}

// envHeadRoom is the room putDisk has on the stack for an envelope's
// header: the fixed part, a due time, an expiry and a key of up to 58
// bytes. A longer key's header goes in a buffer of envelopes.
const envHeadRoom = 96

// putDisk is putEnvelope for a backend that is a diskqueue.Log: the log
// copies the envelope's header, encoded on the stack, and the body
// straight into its segment (PutWithHead), where the envelope built whole
// would copy the body once more first. A message not stamped yet (fill)
// takes its record's timestamp: the log reads its clock once for many
// records (a clock read costs about 50 ns on a virtual machine, a tenth
// of a Put to disk), so it is a reading taken before the Put returned, at
// most about a millisecond older than the Put, as a record's is.
func (c *Channel) putDisk(ctx context.Context, m *Message) error {
	if MaxEnvelopeOverhead+keyOverhead(m.Key) > envHeadRoom {
		buf := envelopes.Get().(*[]byte)
		*buf = appendEnvelopeHead((*buf)[:0], m)
		err := c.putHead(ctx, m, *buf)
		freeEnvelope(buf)
		return err
	}
	var room [envHeadRoom]byte
	return c.putHead(ctx, m, appendEnvelopeHead(room[:0], m))
}

// putHead stores m, whose envelope's header is head, in c.disk, and
// leaves in m the record it went to and, if the log stamped it, the time.
func (c *Channel) putHead(ctx context.Context, m *Message, head []byte) error {
	stampAt := -1
	if m.Timestamp.IsZero() {
		stampAt = envStampAt
	}
	seq, ts, err := c.disk.PutWithHead(ctx, head, m.Body, stampAt)
	if stored(err) {
		m.seq, m.src = seq, srcBackend
		if stampAt >= 0 {
			m.Timestamp = time.Unix(0, ts)
		}
	}
	return err
}

// stamp returns the time now as the channel's start time plus the
// monotonic time since: one clock read where time.Now takes two, and
// immune to the wall clock stepping while the channel runs.
func (c *Channel) stamp() time.Time {
	return c.started.Add(time.Since(c.started))
}

// delivered lowers diskPending by one, never below zero: an Empty racing a
// Put can leave a record the count no longer includes.
func (c *Channel) delivered() { decrementToZero(&c.diskPending) }

// bound returns a context that also ends when the channel closes, and the
// function that releases it, which must be called.
func (c *Channel) bound(ctx context.Context) (context.Context, func()) {
	return bound(ctx, c.closeCtx)
}

// bound returns a context that ends with ctx or with closing, and the
// function that releases it, which must be called. Most callers pass
// context.Background, which costs nothing to replace.
func bound(ctx, closing context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return closing, func() {}
	}
	merged, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(closing, cancel)
	return merged, func() {
		stop()
		cancel()
	}
}

// bodyLimits returns the shortest and longest body that makes a record l
// accepts once in its envelope. New reads the limits once, and Put refuses
// any body that would not make a record in range once in its envelope,
// with [ErrTooLarge] or [ErrTooSmall], rather than accept it into memory
// and fail to keep it at Close.
func bodyLimits(l Log) (minBody, maxBody int, err error) {
	limit := l.MaxRecordBytes()
	if limit < MaxEnvelopeOverhead {
		return 0, 0, fmt.Errorf("%w: the backend's record limit of %d bytes leaves no room for a body (the envelope takes up to %d)", ErrInvalidOptions, limit, MaxEnvelopeOverhead)
	}
	maxBody = limit - MaxEnvelopeOverhead
	minBody = max(l.MinRecordBytes()-MinEnvelopeOverhead, 0)
	if minBody > maxBody {
		return 0, 0, fmt.Errorf("%w: the backend's record limits [%d, %d] leave no body size that fits every envelope", ErrInvalidOptions, l.MinRecordBytes(), limit)
	}
	return minBody, maxBody, nil
}

// checkBody refuses a body outside [minBody, maxBody], maxBody counting
// the key too (its length and 2).
func checkBody(body, key []byte, minBody, maxBody int) error {
	if k := keyOverhead(key); len(body)+k > maxBody {
		if k > 0 {
			return fmt.Errorf("%w: body of %d bytes and key of %d take %d bytes of the %d a message may (a key takes 2 bytes more than its length)", ErrTooLarge, len(body), len(key), len(body)+k, maxBody)
		}
		return fmt.Errorf("%w: body of %d bytes, limit %d", ErrTooLarge, len(body), maxBody)
	}
	if len(body) < minBody {
		return fmt.Errorf("%w: body of %d bytes, minimum %d", ErrTooSmall, len(body), minBody)
	}
	return nil
}
