package spillq

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// ChannelOptions configures one channel of a topic ([Topic.Channel]). The
// zero value is valid: a channel that starts at the next message put, with
// no memory buffer, nsqd's 60-second timeout, unlimited attempts.
type ChannelOptions struct {
	// Start is where a channel created now begins: diskqueue.FromNext()
	// (the zero value; nsqd's behaviour: only messages put from now on),
	// FromOldest(), FromSeq(n) or FromTime(t). An existing channel goes on
	// from where it was.
	Start diskqueue.Start

	// MemQueueSize is how many messages may wait in this channel's memory
	// buffer. A message goes through memory only while every channel of
	// the topic has room and nothing waiting on disk (see
	// [channel.Fanout]); it is then in no log, and lost if the process
	// crashes. Zero, the default, sends every message through the log.
	MemQueueSize int

	// DropWhenFull chooses what happens when the topic's log reaches
	// Disk.MaxDiskBytes with this channel behind. False, the default,
	// holds its messages: Put returns diskqueue.ErrDiskFull (or waits,
	// with Disk.BlockWhenFull) until the channel catches up, so nothing
	// put is lost unless someone says so. True gives up this channel's
	// oldest backlog instead, a segment at a time: the messages lost are
	// counted (ChannelStats.Cursor.Dropped, the metrics) and logged, and
	// the channel goes on from the oldest message kept; the other channels
	// are not affected. Set it for channels whose consumers can afford to
	// lose work (sampling, analytics) so they never stop the topic. It is
	// not stored: set it each time the channel is opened; a channel not
	// open holds.
	DropWhenFull bool

	// Keys is the channel's key policy: channel.KeyNone (the default) or
	// channel.KeySerial, one message per key at a time for this channel
	// (see channel.Options.Keys). The policies that decide at Put are the
	// topic's (TopicOptions.Keys).
	Keys channel.KeyPolicy

	// MsgTimeout, MaxAttempts, DeadLetter, DiscardDeadLetters and
	// MaxDeferredInMemory are as in [Options], for this channel alone: its
	// dead-letter store ([Topic.DeadLetters]) is in its timer store's
	// directory, channels/NAME/[DeadDir].
	MsgTimeout          time.Duration
	MaxAttempts         uint16
	DeadLetter          func(m *channel.Message, reason error) error
	DiscardDeadLetters  bool
	MaxDeferredInMemory int
}

// openChannel is a channel open in this process and its timer store.
type openChannel struct {
	ch     *channel.Channel
	user   *Channel // ch as Topic.Channel hands it out
	timers *diskqueue.Queue
	dead   *DeadLetters // nil: ChannelOptions.DiscardDeadLetters
}

// channelSet is a topic's channels as this process has them: those open,
// the cursors kept from one opening of a channel to the next, and the
// depths Stats has read of closed channels' timer and dead-letter stores.
type channelSet struct {
	// mu guards open, depths and openings, which a channel's Close
	// changes (from its timer store's Close) while an operation may hold
	// Topic.opMu.
	mu   sync.Mutex
	open map[string]openChannel
	// depths is the depth of a closed channel's timer store and of its
	// dead-letter store, each read once by Stats: nothing writes either
	// while its channel is closed and its topic open (OpenDeadLetters,
	// the operator's purge, takes the topic's lock). openings counts each
	// channel's opens and closes, so that a depth read across one is not
	// kept.
	depths   map[closedStore]int64
	openings map[string]uint64
	// cursors are the channels' cursors, kept from one opening of a
	// channel to the next with what it read ahead (given back to the
	// cursor: Cursor.Unread). Guarded by Topic.opMu, not mu.
	cursors map[string]*diskqueue.Cursor
}

func newChannelSet() *channelSet {
	return &channelSet{
		open: map[string]openChannel{}, cursors: map[string]*diskqueue.Cursor{},
		depths: map[closedStore]int64{}, openings: map[string]uint64{},
	}
}

// closedStore names a store of a closed channel: its timer store, or
// (dead) its dead-letter store.
type closedStore struct {
	name string
	dead bool
}

// get returns the named channel if it is open.
func (s *channelSet) get(name string) (openChannel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	oc, ok := s.open[name]
	return oc, ok
}

// snapshot returns the channels open now.
func (s *channelSet) snapshot() map[string]openChannel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.open)
}

// opened records oc open, with its dead-letter store given its channel
// first: whoever finds it open can redrive into it.
func (s *channelSet) opened(name string, oc openChannel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	oc.dead.setChannel(oc.ch)
	s.open[name] = oc
	s.forgetDepths(name)
	s.openings[name]++
}

// closed forgets an open channel its Close has closed.
func (s *channelSet) closed(name string, ch *channel.Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[name].ch == ch {
		delete(s.open, name)
		s.openings[name]++
	}
}

// cursor returns the named channel's cursor, kept from its last opening,
// or the one newCursor opens. Under Topic.opMu.
func (s *channelSet) cursor(name string, newCursor func() (*diskqueue.Cursor, error)) (*diskqueue.Cursor, error) {
	if cur := s.cursors[name]; cur != nil {
		return cur, nil
	}
	cur, err := newCursor()
	if err != nil {
		return nil, err
	}
	s.cursors[name] = cur
	return cur, nil
}

// forget drops what the set keeps of a channel whose cursor is deleted.
// Under Topic.opMu.
func (s *channelSet) forget(name string) {
	delete(s.cursors, name)
	s.mu.Lock()
	s.forgetDepths(name)
	s.mu.Unlock()
}

// forgetDepths drops the depths read of the named channel's stores.
// Under mu.
func (s *channelSet) forgetDepths(name string) {
	delete(s.depths, closedStore{name, false})
	delete(s.depths, closedStore{name, true})
}

// closedDepth is the depth of a store of a channel not open, read by
// read the first time it is asked for and kept until the channel opens.
// What a failed read (ok false) returns is not kept: the store is read
// again next time. Nor is a depth read while the channel opened or closed.
func (s *channelSet) closedDepth(store closedStore, read func() (n int64, ok bool)) int64 {
	name := store.name
	s.mu.Lock()
	n, ok := s.depths[store]
	opening := s.openings[name]
	s.mu.Unlock()
	if ok {
		return n
	}
	if n, ok = read(); !ok {
		return n
	}
	s.mu.Lock()
	if _, isOpen := s.open[name]; !isOpen && s.openings[name] == opening {
		s.depths[store] = n
	}
	s.mu.Unlock()
	return n
}

// Channel returns the named channel, creating it at opts.Start if the
// topic has none of that name. Names are as for cursors (letters, digits,
// '.', '_', '-'; up to 64 bytes; see [diskqueue.ErrBadCursorName]). A
// channel already open is returned as it is, whatever opts says. Closing
// the channel leaves its place in the topic, which keeps its messages
// until it is opened again or deleted.
func (t *Topic) Channel(name string, opts ChannelOptions) (*Channel, error) {
	t.opMu.Lock()
	defer t.opMu.Unlock()
	if t.closed {
		return nil, channel.ErrClosed
	}
	if oc, ok := t.chans.get(name); ok {
		return oc.user, nil
	}
	chOpts := channel.Options{
		MemQueueSize:        opts.MemQueueSize,
		MaxDeferredInMemory: opts.MaxDeferredInMemory,
		Keys:                opts.Keys,
		MsgTimeout:          opts.MsgTimeout,
		MaxAttempts:         opts.MaxAttempts,
		DeadLetter:          opts.DeadLetter,
		Logger:              t.topts.Logger,
	}
	// Options refused before anything durable is made: a channel made for
	// them would hold the log from then on, with no one to read it.
	if err := t.fan.CheckOptions(chOpts); err != nil {
		return nil, fmt.Errorf("spillq: channel %q: %w", name, err)
	}
	existed := slices.Contains(t.log.Cursors(), name)
	if !existed {
		// Before the cursor exists: from then on, messages must reach it.
		t.fan.SetDurable(len(t.log.Cursors()) + 1)
	}
	cur, err := t.chans.cursor(name, func() (*diskqueue.Cursor, error) { return t.log.Cursor(name, opts.Start) })
	if err != nil {
		t.fan.SetDurable(len(t.log.Cursors()))
		return nil, fmt.Errorf("spillq: channel %q: %w", name, err)
	}
	// undo takes back a channel made by this call that then failed to
	// open, for the same reason.
	undo := func() {
		if existed {
			return
		}
		if err := t.log.DeleteCursor(name); err != nil {
			orDiscard(t.topts.Logger).Warn("spillq: cannot remove a channel that failed to open; it holds the topic's log until deleted", "channel", name, "err", err)
			return
		}
		t.chans.forget(name)
		t.fan.SetDurable(len(t.log.Cursors()))
		t.fs.RemoveAll(filepath.Join(t.dir, ChannelsDir, name))
	}
	cur.SetDropWhenFull(opts.DropWhenFull)
	tq, err := diskqueue.Open(filepath.Join(t.dir, ChannelsDir, name), t.topts)
	if err != nil {
		undo()
		return nil, fmt.Errorf("spillq: channel %q: timer store: %w", name, err)
	}
	dead, err := channelDeadLetters(t.dir, name, t.topts, opts, &chOpts)
	if err != nil {
		tq.Close()
		undo()
		return nil, fmt.Errorf("spillq: channel %q: %w", name, err)
	}
	var ch *channel.Channel
	// The channel's Close closes its timer store last, after its
	// journal: then the channel is gone, and the topic learns it.
	chOpts.Timers = channel.Store{Log: tq.Log, Cursor: tq.OwnCursor(), Close: func() error {
		err := tq.Close()
		cur.SetDropWhenFull(false) // as after a restart: a channel not open holds
		// The channel's Close calls its handler no more.
		if err := dead.close(); err != nil {
			orDiscard(t.topts.Logger).Warn("spillq: cannot close a channel's dead-letter store", "channel", name, "err", err)
		}
		t.chans.closed(name, ch)
		return err
	}}
	// Beside the timer store, inside its directory: it goes with it.
	jq, err := openDeliveries(filepath.Join(t.dir, ChannelsDir, name), t.topts, opts.MaxAttempts)
	if err != nil {
		dead.close()
		tq.Close()
		undo()
		return nil, fmt.Errorf("spillq: channel %q: %w", name, err)
	}
	chOpts.Deliveries = deliveries(jq)
	ch, err = t.fan.Join(cur, chOpts)
	if err != nil {
		closeQueue(jq)
		dead.close()
		tq.Close()
		undo()
		return nil, fmt.Errorf("spillq: channel %q: %w", name, err)
	}
	user := &Channel{verbs{ch}}
	t.chans.opened(name, openChannel{ch: ch, user: user, timers: tq, dead: dead})
	return user, nil
}

// Lookup returns the named channel if it is open in this process, and
// opens nothing: for a tool acting on channels a service opened (an
// admin endpoint pausing one), which must not open a closed one with
// options of its own choosing.
func (t *Topic) Lookup(name string) (*Channel, bool) {
	oc, ok := t.chans.get(name)
	if !ok {
		return nil, false
	}
	return oc.user, true
}

// Channels returns the names of the topic's channels, open or not, sorted.
func (t *Topic) Channels() []string { return t.log.Cursors() }

// DeleteChannel removes the named channel and everything only it held: its
// cursor, its acknowledgements, its deferred messages, and the segments of
// the log no other channel still needs. An open channel is closed first
// (its Receive calls return [channel.ErrClosed]). It returns
// [diskqueue.ErrNotFound] for a channel the topic does not have.
func (t *Topic) DeleteChannel(name string) error {
	t.opMu.Lock()
	defer t.opMu.Unlock()
	if t.closed {
		return channel.ErrClosed
	}
	if oc, ok := t.chans.get(name); ok {
		oc.user.Close() // what it held goes with it
	}
	// The cursor first: a timer store without one is a deletion a crash
	// cut short, which the next OpenTopic finishes.
	if err := t.log.DeleteCursor(name); err != nil {
		return fmt.Errorf("spillq: delete channel %q: %w", name, err)
	}
	t.chans.forget(name)
	t.fan.SetDurable(len(t.log.Cursors()))
	if err := t.fs.RemoveAll(filepath.Join(t.dir, ChannelsDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spillq: delete channel %q: remove its timer store: %w", name, err)
	}
	return nil
}
