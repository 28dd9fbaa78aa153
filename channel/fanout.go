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
	log              Log
	minBody, maxBody int
	// numbered says log numbers its records (see Log): Put learns each
	// record's seq.
	numbered bool

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

	// keys is the topic's key policy at Put (FanoutOptions.Keys), nil
	// without one.
	keys         *keyTable
	duplicatesOK bool
}

// FanoutOptions configures [NewFanout]. The zero value is valid.
type FanoutOptions struct {
	// Keys is the topic's key policy for messages put with a key, decided
	// at Put for every channel: KeyNone (the default), or
	//   - KeyUnique: a Put whose key has a message that some channel has not
	//     finished (acknowledged) is refused with [ErrDuplicate];
	//   - KeyReplace: each channel drops, as it takes it, a message a newer
	//     one with its key superseded (counted in its Stats.Superseded);
	//   - KeyDedup: a Put whose key was put within DedupWindow is refused.
	// KeySerial is a channel's own (Options.Keys). Under a key policy a
	// keyed message never goes through the memory buffers (the key state
	// names records), and under KeyUnique and KeyReplace a channel leaves
	// its record in the log until it is done with it, never moving it to
	// its timer store: the log's acknowledgements say when every channel
	// is done. The log must number its records (see [Log]).
	Keys         KeyPolicy
	DedupWindow  time.Duration // KeyDedup; zero means DefaultDedupWindow
	DuplicatesOK bool          // a refused Put returns nil, counted
	// KeyState is the state a restart picks up, as in Options.KeyState:
	// spillq.OpenTopic keeps it in the topic's directory.
	KeyState *KeyState
}

// Check returns the error [NewFanout] would return for o's own values (an
// [ErrInvalidOptions]), before a log is opened for it.
func (o FanoutOptions) Check() error {
	if _, err := dedupWindow(o.DedupWindow); err != nil {
		return err
	}
	switch o.Keys {
	case KeyNone, KeyUnique, KeyReplace, KeyDedup:
		return nil
	}
	return fmt.Errorf("%w: Keys %v on a topic: it takes KeyNone, KeyUnique, KeyReplace or KeyDedup (KeySerial is a channel's)", ErrInvalidOptions, o.Keys)
}

// NewFanout returns a Fanout over log, with no channel yet. Until one
// joins, messages go to the log only. Put refuses a body whose envelope
// would not fit the log's record limits; the seqs a joined channel's
// Cursor hands out are the log's.
func NewFanout(log Log, opts FanoutOptions) (*Fanout, error) {
	if log == nil {
		return nil, fmt.Errorf("%w: NewFanout needs a Log", ErrInvalidOptions)
	}
	f := &Fanout{log: log, started: time.Now(), duplicatesOK: opts.DuplicatesOK, numbered: numbers(log)}
	var err error
	if f.minBody, f.maxBody, err = bodyLimits(log); err != nil {
		return nil, err
	}
	if err := opts.Check(); err != nil {
		return nil, err
	}
	window, _ := dedupWindow(opts.DedupWindow)
	switch opts.Keys {
	case KeyNone:
	case KeyUnique, KeyReplace, KeyDedup:
		if !f.numbered {
			return nil, fmt.Errorf("%w: Keys %v names records by seq, and needs a Log that numbers its records (its ReadAt says errors.ErrUnsupported)", ErrInvalidOptions, opts.Keys)
		}
		if f.keys, err = newKeyTable(opts.Keys, window, log.Acknowledged, opts.KeyState); err != nil {
			return nil, err
		}
	}
	f.closeCtx, f.cancel = context.WithCancel(context.Background())
	f.firstID = firstID(opts.KeyState)
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

// CheckOptions returns the error [Fanout.Join] would return for opts' own
// values (an [ErrInvalidOptions]), without joining: a caller that makes
// durable state for a channel (a topic's cursor) makes it only for options
// Join takes. It leaves out what Join asks of Backend and Timers.
func (f *Fanout) CheckOptions(opts Options) error {
	_, err := checkOptions(opts, true)
	return err
}

// Join makes a channel of the topic that reads cur, its cursor over the
// topic's log, and receives the messages the memory path hands it from now
// on. opts is as for [New], with no Backend and with Timers required: a
// topic's channel keeps what it holds at Close (in flight, requeued,
// deferred, in its memory buffer) in its timer store, never in the shared
// log, all due at Close but the deferred ones, and a channel joined over
// that store delivers those first: until it has read the store for them
// (in the background, from Join on) and put them on its ready list, its
// receivers take nothing from its memory buffer or cur. (If that read
// fails, they go on without waiting, and the held messages come when a
// later read finds them.) Close the channel to leave the topic; its Put
// returns [ErrTopicChannel]. The cursor outlives the channel: at Close the
// channel gives back (Cursor.Unread) what it had read and not handed out,
// for the next channel over cur; it closes its timer store (Options.Timers
// Close), but not cur.
func (f *Fanout) Join(cur Cursor, opts Options) (*Channel, error) {
	switch {
	case cur == nil:
		return nil, fmt.Errorf("%w: Join needs a Cursor", ErrInvalidOptions)
	case opts.Backend.Log != nil || opts.Backend.Cursor != nil:
		return nil, fmt.Errorf("%w: a topic's channel has no Backend of its own", ErrInvalidOptions)
	case opts.Timers.Log == nil:
		return nil, fmt.Errorf("%w: a topic's channel needs Timers, to keep what it holds at Close", ErrInvalidOptions)
	}
	f.memMu.Lock()
	defer f.memMu.Unlock()
	if f.isClosed.Load() {
		return nil, ErrClosed
	}
	c, err := newChannel(opts, cur, f, nil)
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
	_, err := f.Enqueue(ctx, body, po)
	return err
}

// Enqueue is PutWith returning a [Receipt]: the message's ID (every
// channel delivers it with that ID) and, when Logged, its record in the
// log (Seq when the log tells seqs, as spillq's does). A message the
// memory path took (see Fanout) is not Logged. The receipt is valid when
// the error is nil or wraps [ErrNotDurable]; after any other error it is
// the zero Receipt. A Put the topic's key policy refuses returns a
// [*DuplicateError] naming the message that holds the key.
func (f *Fanout) Enqueue(ctx context.Context, body []byte, po PutOptions) (Receipt, error) {
	var r Receipt
	_, err := f.put(ctx, [][]byte{body}, po, &r)
	if !stored(err) {
		return Receipt{}, err
	}
	return r, err
}

// PutBatch puts bodies in order, as Put each would, sharing the log's
// lock and (with a sync policy that waits) one fsync. It returns how many
// were put, a prefix of bodies, and the first error; every body is checked
// against the log's limits before any is put.
func (f *Fanout) PutBatch(ctx context.Context, bodies [][]byte) (int, error) {
	return f.put(ctx, bodies, PutOptions{}, nil)
}

// put puts bodies, and when r is not nil (bodies holds one) fills in its
// Receipt.
func (f *Fanout) put(ctx context.Context, bodies [][]byte, po PutOptions, r *Receipt) (int, error) {
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
		if err := checkBody(b, po.Key, f.minBody, f.maxBody); err != nil {
			return 0, err
		}
	}
	if po.Key != nil && f.keys != nil && len(bodies) == 1 {
		return f.putKeyed(ctx, bodies[0], po, r)
	}
	msgs := make([]Message, len(bodies))
	for i, b := range bodies {
		f.newMessage(&msgs[i], b, po)
	}
	if r != nil {
		r.ID = msgs[0].ID
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
	n, seq, err := f.toLog(ctx, msgs[done:])
	if err != nil {
		f.putFailures.Add(int64(len(msgs) - done - n))
	}
	if r != nil && n == 1 {
		r.Seq, r.Logged = seq, true
	}
	return done + n, err
}

// newMessage makes the Fanout's next message.
func (f *Fanout) newMessage(m *Message, body []byte, po PutOptions) {
	*m = Message{ID: ID(f.nextID.Add(1)), Body: body, Key: po.Key, Timestamp: f.stamp()}
	if po.Delay > 0 {
		m.due = unixNano(m.Timestamp.Add(po.Delay))
	}
	if !po.Expires.IsZero() {
		m.expires = unixNano(po.Expires)
	}
}

// putKeyed puts a message with a key under the topic's key policy: the
// policy admits it, it goes to the log (never the memory buffers: the key
// state names its record), and the policy learns its seq, or takes it back
// if the log refused it.
func (f *Fanout) putKeyed(ctx context.Context, body []byte, po PutOptions, r *Receipt) (int, error) {
	var m Message
	f.newMessage(&m, body, po)
	adm, err := f.keys.admit(m.Key, m.ID, m.Timestamp.UnixNano())
	if err != nil {
		f.putFailures.Add(1) // not a Put: the duplicates count it
		if dup, ok := err.(*DuplicateError); ok && f.duplicatesOK {
			if r != nil {
				*r = Receipt{ID: dup.ID, Duplicate: true}
			}
			return 1, nil
		}
		return 0, err
	}
	bctx, release := bound(ctx, f.closeCtx)
	defer release()
	seq, err := f.putOne(bctx, &m)
	if !stored(err) {
		f.keys.undo(m.ID, adm)
		f.putFailures.Add(1)
		return 0, f.putErr(err)
	}
	f.keys.commit(adm, m.ID, seq, srcBackend)
	if r != nil {
		*r = Receipt{ID: m.ID, Seq: seq, Logged: true}
	}
	if err != nil {
		return 1, f.putErr(err)
	}
	return 1, nil
}

// putOne stores m's envelope in the log, encoded into a pooled buffer,
// and returns its seq when the log numbers its records (spillq's, with or
// without a key policy).
func (f *Fanout) putOne(ctx context.Context, m *Message) (seq uint64, err error) {
	buf := pooledEnvelope(m)
	if f.numbered {
		seq, err = f.log.PutSeq(ctx, *buf)
	} else {
		err = f.log.Put(ctx, *buf)
	}
	freeEnvelope(buf)
	return seq, err
}

// pinsKeys reports whether the topic's key policy names pending keyed
// messages by their records (see FanoutOptions.Keys).
func (f *Fanout) pinsKeys() bool {
	return f.keys != nil && (f.keys.policy == KeyUnique || f.keys.policy == KeyReplace)
}

// KeyState returns a snapshot of the topic's key policy state for a
// restart to pick up (FanoutOptions.KeyState), and whether it has one.
// Puts wait while it copies the state, so that its watermark is exact.
func (f *Fanout) KeyState() (KeyState, bool) {
	if f.keys == nil {
		return KeyState{}, false
	}
	f.putMu.Lock()
	st := KeyState{Policy: f.keys.policy, Watermark: f.log.NextSeq()}
	snap := f.keys.snapshot(f.log.Floor(), f.stamp().UnixNano())
	f.putMu.Unlock()
	st.Entries = snap.entries()
	return st, true
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

// toLog appends msgs to the log, returning how many it stored and, for
// one message, its record's seq when the log tells it (putOne).
func (f *Fanout) toLog(ctx context.Context, msgs []Message) (n int, seq uint64, err error) {
	bctx, release := bound(ctx, f.closeCtx)
	defer release()
	if len(msgs) == 1 {
		seq, err := f.putOne(bctx, &msgs[0])
		switch {
		case err == nil:
			return 1, seq, nil
		case stored(err):
			return 1, seq, f.putErr(err)
		}
		return 0, 0, f.putErr(err)
	}
	envs := make([][]byte, len(msgs))
	for i := range msgs {
		envs[i] = appendEnvelope(nil, &msgs[i])
	}
	n, err = f.log.PutBatch(bctx, envs)
	if err != nil {
		return n, 0, f.putErr(err)
	}
	return n, 0, nil
}

// putErr is an error of the log's Put as the Fanout returns it: Close's
// canceling of a Put waiting in the log is ErrClosed, unless the Put had
// stored its message (ErrNotDurable), which callers must be able to tell.
func (f *Fanout) putErr(err error) error {
	if f.isClosed.Load() && errors.Is(err, context.Canceled) && !stored(err) {
		return ErrClosed
	}
	return fmt.Errorf("channel: put to the topic's log: %w", err)
}

// FanoutStats is a snapshot of a [Fanout]'s counters.
type FanoutStats struct {
	Puts        int64 // messages accepted
	ToMemory    int64 // of those, handed to the channels' memory buffers
	ToLog       int64 // of those, written to the log
	PutFailures int64 // messages the log or the key policy refused (not in Puts); a body or key refused for its size before an ID is taken is in neither
	Channels    int   // channels joined
	// KeysPending is the keys the topic's key policy holds: with a
	// message some channel has not finished (KeyUnique; an entry goes at
	// the next KeyState once every channel has finished all before it, or
	// at the next Put of its key), with a newest version some channel
	// may still reach (KeyReplace; an entry goes at the next KeyState
	// once every channel has finished all before it, so it stays counted
	// until then, about a second under spillq.OpenTopic), put within the
	// window (KeyDedup).
	// Duplicates counts the Puts the policy refused.
	KeysPending int
	Duplicates  int64
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
	if f.keys != nil {
		st.KeysPending, _ = f.keys.stats(f.stamp().UnixNano())
		st.Duplicates = f.keys.duplicates.Load()
	}
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

// stamp is the time now on the topic's clock, which its Puts are stamped
// by: the wall clock at NewFanout plus the monotonic time since, immune to
// the wall clock stepping.
func (f *Fanout) stamp() time.Time { return f.started.Add(time.Since(f.started)) }
