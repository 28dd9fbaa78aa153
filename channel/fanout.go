package channel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Fanout is a topic's write side: every message put to it reaches every
// channel joined to it ([Fanout.Join]), with one write to the topic's log
// however many channels there are. spillq.OpenTopic pairs it with
// spillq's disk log and gives each channel a cursor over the log.
//
// A message goes through the channels' memory buffers only when every
// channel the topic has is joined, each has room, and none has anything
// waiting in the log; then each gets its own copy in memory and the log is
// not written. Otherwise it is written to the log once, and each channel
// reads it there through its cursor, behind what it had not read yet: so
// each channel sees messages in put order across the spill, as a Channel of
// its own does, and a channel that is behind does not make another lose a
// message. The memory tier holds a message for all channels or for none: a
// message kept in memory for some and on disk for the others would be
// delivered twice, or lost by the ones holding it in memory on a crash. A
// message put with a delay always goes to the log; each channel moves it to
// its own timer store as it reads it.
type Fanout struct {
	log              FanoutLog
	minBody, maxBody int

	// putMu is held shared by every Put while it hands its messages over,
	// so Close can wait for Puts in progress.
	putMu    sync.RWMutex
	isClosed atomic.Bool
	closeCtx context.Context
	cancel   context.CancelFunc

	// memMu serialises the memory path with itself and with changes to
	// the members: room is checked and taken in every member at once, and
	// only the memory path sends to a member's memory buffer, so the
	// sends never wait.
	memMu   sync.Mutex
	members []*Channel
	durable int // channels the topic has, joined or not

	started time.Time
	firstID uint64
	nextID  atomic.Uint64
	// toMemory counts messages put through the memory buffers; puts less
	// it (and failures) went to the log.
	toMemory    atomic.Int64
	putFailures atomic.Int64
}

// FanoutLog is the log a [Fanout] appends to. spillq's diskqueue.Log is
// one. If it is also a [RecordLimiter], Put refuses bodies it could not
// store, and if it has a method PutBatch(ctx, bodies [][]byte) (int, error)
// storing a prefix of bodies and reporting its length, [Fanout.PutBatch]
// uses it.
type FanoutLog interface {
	// Put appends body as the record with seq NextSeq (at the time it is
	// stored); it must not keep body.
	Put(ctx context.Context, body []byte) error
	// NextSeq is the seq the next record put gets. The seqs a joined
	// channel's Source hands out are the log's.
	NextSeq() uint64
}

type batchLog interface {
	PutBatch(ctx context.Context, bodies [][]byte) (int, error)
}

// NewFanout returns a Fanout over log, with no channel yet. Until one
// joins, messages go to the log only.
func NewFanout(log FanoutLog) (*Fanout, error) {
	f := &Fanout{log: log, started: time.Now()}
	var err error
	if f.minBody, f.maxBody, err = bodyLimits(log); err != nil {
		return nil, err
	}
	f.closeCtx, f.cancel = context.WithCancel(context.Background())
	f.firstID = uint64(f.started.UnixNano())
	f.nextID.Store(f.firstID)
	return f, nil
}

// SetDurable says how many channels the topic has, open or not: while it
// is more than the channels joined, every message goes to the log, where
// the others will read it.
func (f *Fanout) SetDurable(n int) {
	f.memMu.Lock()
	defer f.memMu.Unlock()
	f.durable = n
}

// Join makes a channel of the topic that reads src, its cursor over the
// topic's log, and receives the messages the memory path hands it from now
// on. opts is as for [New], with no Backend and with Timers required: a
// topic's channel keeps what it holds at Close (in flight, requeued,
// deferred, in its memory buffer) in its timer store, never in the shared
// log. Close the channel to leave the topic; its Put returns
// [ErrTopicChannel].
func (f *Fanout) Join(src Source, opts Options) (*Channel, error) {
	switch {
	case src == nil:
		return nil, fmt.Errorf("%w: Join needs a Source", ErrInvalidOptions)
	case opts.Backend != nil:
		return nil, fmt.Errorf("%w: a topic's channel has no Backend of its own", ErrInvalidOptions)
	case opts.Timers == nil:
		return nil, fmt.Errorf("%w: a topic's channel needs Timers, to keep what it holds at Close", ErrInvalidOptions)
	}
	f.memMu.Lock()
	defer f.memMu.Unlock()
	if f.isClosed.Load() {
		return nil, ErrClosed
	}
	c, err := newChannel(opts, src, f)
	if err != nil {
		return nil, err
	}
	f.members = append(f.members, c)
	return c, nil
}

// leave takes c off the members, at its Close.
func (f *Fanout) leave(c *Channel) {
	f.memMu.Lock()
	defer f.memMu.Unlock()
	f.members = slices.DeleteFunc(slices.Clone(f.members), func(m *Channel) bool { return m == c })
}

// Put sends body to every channel of the topic. The Fanout takes ownership
// of body: do not change it after Put returns. A body the log could not
// store is refused with [ErrTooLarge] or [ErrTooSmall].
func (f *Fanout) Put(ctx context.Context, body []byte) error {
	return f.PutWith(ctx, body, PutOptions{})
}

// PutWith is Put with a delay or an expiry, which every channel applies
// on its own.
func (f *Fanout) PutWith(ctx context.Context, body []byte, po PutOptions) error {
	_, err := f.put(ctx, [][]byte{body}, po)
	return err
}

// PutBatch puts bodies in order, as Put each would, sharing the log's
// lock and (with a sync policy that waits) one fsync. It returns how many
// were put, a prefix of bodies, and the first error; every body is checked
// against the log's limits before any is put.
func (f *Fanout) PutBatch(ctx context.Context, bodies [][]byte) (int, error) {
	return f.put(ctx, bodies, PutOptions{})
}

func (f *Fanout) put(ctx context.Context, bodies [][]byte, po PutOptions) (int, error) {
	f.putMu.RLock()
	defer f.putMu.RUnlock()
	if f.isClosed.Load() {
		return 0, ErrClosed
	}
	if len(po.Key) > MaxKeyBytes {
		return 0, fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(po.Key), MaxKeyBytes)
	}
	if len(po.Key) == 0 {
		po.Key = nil
	}
	for _, b := range bodies {
		if err := checkBody(b, f.minBody, f.maxBody-keyOverhead(po.Key)); err != nil {
			return 0, err
		}
	}
	msgs := make([]Message, len(bodies))
	for i, b := range bodies {
		m := &msgs[i]
		*m = Message{ID: ID(f.nextID.Add(1)), Body: b, Key: po.Key, Timestamp: f.started.Add(time.Since(f.started))}
		if po.Delay > 0 {
			m.due = m.Timestamp.Add(po.Delay).UnixNano()
		}
		if !po.Expires.IsZero() {
			m.expires = po.Expires.UnixNano()
		}
	}
	done := 0
	if po.Delay <= 0 {
		for done < len(msgs) && f.toMemoryTier(&msgs[done]) {
			done++
		}
		f.toMemory.Add(int64(done))
	}
	if done == len(msgs) {
		return done, nil
	}
	n, err := f.toLog(ctx, msgs[done:])
	if err != nil {
		f.putFailures.Add(int64(len(msgs) - done - n))
	}
	return done + n, err
}

// toMemoryTier hands m to every member's memory buffer, if the memory
// path is open (see Fanout) and every one has room; it reports whether it
// did.
func (f *Fanout) toMemoryTier(m *Message) bool {
	f.memMu.Lock()
	defer f.memMu.Unlock()
	if len(f.members) == 0 || len(f.members) < f.durable {
		return false
	}
	for _, c := range f.members {
		if c.memCh == nil || len(c.memCh) == cap(c.memCh) || c.diskDepth() > 0 {
			return false
		}
	}
	for _, c := range f.members {
		cp := *m
		cp.ch, cp.gen = c, c.gen.Load()
		c.memCh <- &cp
	}
	return true
}

// toLog appends msgs to the log, returning how many it stored.
func (f *Fanout) toLog(ctx context.Context, msgs []Message) (int, error) {
	bctx, release := bound(ctx, f.closeCtx)
	defer release()
	if len(msgs) == 1 {
		buf := envelopes.Get().(*[]byte)
		*buf = appendEnvelope((*buf)[:0], &msgs[0])
		err := f.log.Put(bctx, *buf)
		if cap(*buf) <= 64<<10 {
			envelopes.Put(buf)
		}
		if err != nil {
			return 0, f.putErr(err)
		}
		return 1, nil
	}
	envs := make([][]byte, len(msgs))
	for i := range msgs {
		envs[i] = appendEnvelope(nil, &msgs[i])
	}
	if b, ok := f.log.(batchLog); ok {
		n, err := b.PutBatch(bctx, envs)
		if err != nil {
			return n, f.putErr(err)
		}
		return n, nil
	}
	for i, env := range envs {
		if err := f.log.Put(bctx, env); err != nil {
			return i, f.putErr(err)
		}
	}
	return len(envs), nil
}

func (f *Fanout) putErr(err error) error {
	if f.isClosed.Load() && errors.Is(err, context.Canceled) {
		return ErrClosed
	}
	return fmt.Errorf("channel: put to the topic's log: %w", err)
}

// FanoutStats is a snapshot of a [Fanout]'s counters.
type FanoutStats struct {
	Puts        int64 // messages accepted
	ToMemory    int64 // of those, handed to the channels' memory buffers
	ToLog       int64 // of those, written to the log
	PutFailures int64 // messages refused by the log (not in Puts)
	Channels    int   // channels joined
}

// Stats returns a snapshot of the Fanout's counters.
func (f *Fanout) Stats() FanoutStats {
	failures := f.putFailures.Load()
	st := FanoutStats{
		Puts:        int64(f.nextID.Load()-f.firstID) - failures,
		ToMemory:    f.toMemory.Load(),
		PutFailures: failures,
	}
	st.ToLog = st.Puts - st.ToMemory
	f.memMu.Lock()
	st.Channels = len(f.members)
	f.memMu.Unlock()
	return st
}

// Close stops Puts: calls waiting in the log return ErrClosed, later ones
// too. It waits for Puts in progress. The joined channels and the log are
// not closed; close them after.
func (f *Fanout) Close() error {
	if !f.isClosed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	f.cancel()
	f.putMu.Lock()
	f.putMu.Unlock() //lint:ignore SA2001 the empty critical section is the barrier
	return nil
}
