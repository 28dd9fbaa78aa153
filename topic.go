package spillq

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// ChannelsDir is the subdirectory of a topic's directory that holds its
// channels' timer stores, one disk queue per channel in ChannelsDir/NAME
// (FORMAT.md, "Topics"). A channel's place in the log is its cursor, in
// the log's cursors/NAME.
const ChannelsDir = "channels"

// TopicOptions configures [OpenTopic]. The zero value is valid.
type TopicOptions struct {
	// Disk configures the topic's log, as Options.Disk does a queue's:
	// nsqd's sync policy by default, Disk.MaxRecordBytes the body limit.
	// Disk.MaxDiskBytes caps the log; each channel's timer store is capped
	// separately by the same figure. Disk.RetainBytes and Disk.RetainAge
	// keep segments every channel has finished, for channels created later
	// from an older seq or time, and for lookups. Disk.FileMode applies to
	// everything in dir, the channels' timer stores included.
	Disk diskqueue.Options

	// Keys, DedupWindow and DuplicatesOK choose the topic's key policy for
	// messages put with a key, decided at Put for all its channels (see
	// channel.FanoutOptions.Keys): channel.KeyNone (the default),
	// KeyUnique (a Put whose key has a message some channel has not
	// finished is refused with channel.ErrDuplicate), KeyReplace (each
	// channel delivers only the newest version of a key it reaches) or
	// KeyDedup (a Put whose key was put within DedupWindow is refused).
	// KeySerial is a channel's own (ChannelOptions.Keys). The state
	// survives a restart and a crash as a queue's does (Options.Keys): it
	// is stored in dir's [KeysDir] every second and at Close, and a change
	// of policy between opens is as a queue's.
	Keys         channel.KeyPolicy
	DedupWindow  time.Duration
	DuplicatesOK bool

	// CompactDirtyRatio is as in [Options], for the topic's log: it
	// applies under KeyReplace (a version every channel would drop goes)
	// and with retention (the finished versions a newer one replaced go).
	CompactDirtyRatio float64

	// Logger receives warnings from every layer. Nil discards.
	Logger *slog.Logger
}

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

// Topic is one durable log read by any number of named channels: each
// message put is written once and delivered to every channel, each with its
// own cursor, acknowledgements, in-flight messages, deferrals, dead letters
// and pause (nsqd's topic, without a copy of every message per channel).
// Channels are durable: their names and places survive a restart, and a
// segment of the log is deleted only once every channel has finished all of
// it. It is safe for concurrent use.
type Topic struct {
	dir   string
	log   *diskqueue.Log
	fan   *channel.Fanout
	topts diskqueue.Options // each channel's timer store
	fs    vfs.FS            // dir's: Disk.FS, or the OS's

	// opMu serialises Channel, DeleteChannel and Close.
	opMu   sync.Mutex
	closed bool
	// openMu guards open, which a channel's Close changes (from its
	// Source's Close) while an operation may hold opMu.
	openMu sync.Mutex
	open   map[string]openChannel
	// closedTimers (under openMu) is the depth of a closed channel's timer
	// store, read once by Stats: nothing writes a timer store while its
	// channel is closed. openings counts each channel's opens and closes,
	// so that a depth read across one is not kept.
	closedTimers map[string]int64
	openings     map[string]uint64
	// cursors are the channels' cursors, kept from one opening of a
	// channel to the next with what it read ahead (given back to the
	// cursor: Cursor.Unread). Guarded by opMu.
	cursors map[string]*diskqueue.Cursor

	// keep stores the key state and compacts; nil when there is neither.
	keep *keeper
	comp *compactor
}

// openChannel is a channel open in this process and its timer store.
type openChannel struct {
	ch     *channel.Channel
	user   *Channel // ch as Topic.Channel hands it out
	timers *diskqueue.Queue
	dead   *DeadLetters // nil: ChannelOptions.DiscardDeadLetters
}

// OpenTopic opens (or creates) the topic in dir. The channels stored there
// keep their places, and the log keeps their messages, but none delivers
// until [Topic.Channel] opens it; until then every message put goes to the
// log. Invalid options are refused as by [Open].
func OpenTopic(dir string, opts TopicOptions) (*Topic, error) {
	dopts, maxBody, err := logOptions(opts.Disk, opts.Logger)
	if err != nil {
		return nil, err
	}
	if err := checkDirtyRatio(opts.CompactDirtyRatio); err != nil {
		return nil, err
	}
	fopts := channel.FanoutOptions{Keys: opts.Keys, DedupWindow: opts.DedupWindow, DuplicatesOK: opts.DuplicatesOK}
	if err := fopts.Check(); err != nil { // before the directory is made
		return nil, fmt.Errorf("spillq: %w", err)
	}
	fsys := vfs.Or(dopts.FS)
	if _, err := fsys.Stat(filepath.Join(dir, "cursor")); err == nil {
		return nil, fmt.Errorf("spillq: %w: %s is a queue's directory (it has a cursor of its own); open it with Open", diskqueue.ErrInvalidOptions, dir)
	}
	if err := fsys.MkdirAll(filepath.Join(dir, ChannelsDir), modesOf(dopts).dir); err != nil {
		return nil, fmt.Errorf("spillq: open topic: %w", err)
	}
	dopts.HoldAtOpen = keepsKeyState(opts.Keys) // see Open
	l, err := diskqueue.OpenLog(dir, dopts)
	if err != nil {
		return nil, openErr(err, maxBody)
	}
	if err := notMessages(dir, l); err != nil {
		l.Close()
		return nil, err
	}
	logger := orDiscard(dopts.Logger)
	saveKeys := keepsKeyState(opts.Keys)
	if saveKeys {
		if fopts.KeyState, err = loadKeyState(dir, modesOf(dopts), l, nil, opts.Keys, opts.DedupWindow, logger); err != nil {
			l.Close()
			return nil, err
		}
	}
	fan, err := channel.NewFanout(l, fopts)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("spillq: %w", err)
	}
	t := &Topic{
		dir: dir, log: l, fan: fan, topts: timerOptions(dopts), fs: fsys,
		open: map[string]openChannel{}, cursors: map[string]*diskqueue.Cursor{},
		closedTimers: map[string]int64{}, openings: map[string]uint64{},
	}
	if err := t.removeOrphans(dopts.Logger); err != nil {
		l.Close()
		return nil, err
	}
	fan.SetDurable(len(l.Cursors()))
	t.comp = newCompactor(l, opts.Keys == channel.KeyReplace, opts.Disk, opts.CompactDirtyRatio, logger)
	if saveKeys || t.comp != nil {
		t.keep = &keeper{dir: dir, modes: modesOf(dopts), logger: logger, comp: t.comp}
		if saveKeys {
			t.keep.state = func() (keyFile, bool) {
				st, ok := fan.KeyState()
				return keyFile{KeyState: st}, ok
			}
			t.keep.hold = func(st keyFile) { l.HoldFrom(st.Watermark) }
			t.keep.pressure, t.keep.sync = l.HoldPressure(), l.Sync
			t.keep.changes = func() [4]int64 {
				fs := fan.Stats()
				var acks int64
				for _, c := range l.CursorStats() {
					acks += c.Acks
				}
				return [4]int64{fs.Puts, acks, int64(fs.KeysPending), 0}
			}
		}
		t.keep.start()
	}
	return t, nil
}

// removeOrphans removes the timer stores of channels the log has no cursor
// for: a crash cut their deletion short (the cursor goes first).
func (t *Topic) removeOrphans(logger *slog.Logger) error {
	entries, err := t.fs.ReadDir(filepath.Join(t.dir, ChannelsDir))
	if err != nil {
		return fmt.Errorf("spillq: open topic: %w", err)
	}
	names := t.log.Cursors()
	for _, e := range entries {
		if _, found := slices.BinarySearch(names, e.Name()); found || !e.IsDir() {
			continue
		}
		if err := t.fs.RemoveAll(filepath.Join(t.dir, ChannelsDir, e.Name())); err != nil {
			return fmt.Errorf("spillq: open topic: remove the timer store of deleted channel %q: %w", e.Name(), err)
		}
		if logger != nil {
			logger.Info("spillq: removed the timer store of a channel deleted before a crash", "channel", e.Name())
		}
	}
	return nil
}

// Put sends body to every channel of the topic, with one write to the log
// however many channels there are. The topic takes ownership of body. A
// body out of Disk's record limits is refused with [channel.ErrTooLarge] or
// [channel.ErrTooSmall].
//
// A Put refused for want of space (diskqueue.ErrDiskFull, at
// Disk.MaxDiskBytes or on a full file system) names the channel furthest
// behind, whose unfinished messages hold the oldest segment.
func (t *Topic) Put(ctx context.Context, body []byte) error {
	_, err := t.Enqueue(ctx, body, channel.PutOptions{})
	return err
}

// PutWith is Put with a delay or an expiry, which each channel applies on
// its own. A delayed message is written to the log, and by each channel to
// its timer store as it reads it.
func (t *Topic) PutWith(ctx context.Context, body []byte, po channel.PutOptions) error {
	_, err := t.Enqueue(ctx, body, po)
	return err
}

// Enqueue is PutWith returning a [channel.Receipt]: the message's ID, which
// every channel delivers it with, and its record's seq in the topic's log
// (Logged; a message the memory path took is not). The receipt is valid
// when the error is nil or wraps [channel.ErrNotDurable]. A Put the topic's
// key policy refuses returns a [*channel.DuplicateError] naming the message
// that holds the key. See [channel.Fanout.Enqueue].
func (t *Topic) Enqueue(ctx context.Context, body []byte, po channel.PutOptions) (channel.Receipt, error) {
	r, err := t.fan.Enqueue(ctx, body, po)
	return r, t.full(err)
}

// PutBatch puts bodies in order, sharing the log's lock and, with
// Disk.SyncEvery 1, one fsync. It returns how many were put (a prefix of
// bodies) and the first error.
func (t *Topic) PutBatch(ctx context.Context, bodies [][]byte) (int, error) {
	n, err := t.fan.PutBatch(ctx, bodies)
	return n, t.full(err)
}

// full adds to a disk-full error which channel holds the oldest segment:
// the one whose oldest unfinished message is oldest, of those not set to
// drop when full (which hold no space at the budget), so an operator
// knows which consumer to look at (or to set DropWhenFull on). Other
// errors pass as they are.
func (t *Topic) full(err error) error {
	if err == nil || !errors.Is(err, diskqueue.ErrDiskFull) {
		return err
	}
	var behind *diskqueue.CursorStats
	for _, cs := range t.log.CursorStats() {
		if cs.Depth > 0 && !cs.DropWhenFull && (behind == nil || cs.ReadSeq < behind.ReadSeq) {
			behind = &cs
		}
	}
	if behind == nil {
		return err
	}
	return fmt.Errorf("%w (channel %q is furthest behind: %d messages not finished, the oldest seq %d)", err, behind.Name, behind.Depth, behind.ReadSeq)
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
	if ch := t.openChannel(name); ch != nil {
		return ch, nil
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
	cur := t.cursors[name]
	if cur == nil {
		var err error
		if cur, err = t.log.Cursor(name, opts.Start); err != nil {
			t.fan.SetDurable(len(t.log.Cursors()))
			return nil, fmt.Errorf("spillq: channel %q: %w", name, err)
		}
		t.cursors[name] = cur
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
		delete(t.cursors, name)
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
		t.closedChannel(name, ch)
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
	t.openMu.Lock()
	dead.setChannel(ch)
	user := &Channel{verbs{ch}}
	t.open[name] = openChannel{ch: ch, user: user, timers: tq, dead: dead}
	delete(t.closedTimers, name)
	t.openings[name]++
	t.openMu.Unlock()
	return user, nil
}

// openChannel returns the named channel if it is open.
func (t *Topic) openChannel(name string) *Channel {
	t.openMu.Lock()
	defer t.openMu.Unlock()
	return t.open[name].user
}

// closedChannel forgets an open channel its Close has closed.
func (t *Topic) closedChannel(name string, ch *channel.Channel) {
	t.openMu.Lock()
	defer t.openMu.Unlock()
	if t.open[name].ch == ch {
		delete(t.open, name)
		t.openings[name]++
	}
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
	if ch := t.openChannel(name); ch != nil {
		ch.Close() // what it held goes with it
	}
	// The cursor first: a timer store without one is a deletion a crash
	// cut short, which the next OpenTopic finishes.
	if err := t.log.DeleteCursor(name); err != nil {
		return fmt.Errorf("spillq: delete channel %q: %w", name, err)
	}
	delete(t.cursors, name)
	t.openMu.Lock()
	delete(t.closedTimers, name)
	t.openMu.Unlock()
	t.fan.SetDurable(len(t.log.Cursors()))
	if err := t.fs.RemoveAll(filepath.Join(t.dir, ChannelsDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spillq: delete channel %q: remove its timer store: %w", name, err)
	}
	return nil
}

// Compact compacts the topic's log now, as [Queue.Compact] does a
// queue's: under KeyReplace every version a newer one superseded goes
// (each channel would drop it), and with retention the finished versions
// a newer one replaced; otherwise nothing. After Close it returns
// [channel.ErrClosed].
func (t *Topic) Compact(ctx context.Context) (CompactStats, error) {
	t.opMu.Lock()
	closed := t.closed
	t.opMu.Unlock()
	if closed {
		return CompactStats{}, channel.ErrClosed
	}
	return t.comp.compact(ctx)
}

// CompactStats returns what every compaction of the topic's log since
// OpenTopic did.
func (t *Topic) CompactStats() CompactStats { return t.comp.stats() }

// KeyState returns a snapshot of the topic's key policy state (what it
// stores every second), and whether it has one.
func (t *Topic) KeyState() (channel.KeyState, bool) { return t.fan.KeyState() }

// Log returns a read-only view of the topic's log: its Stats, its
// segments, its cursors' (one per channel) CursorStats, and lookups by
// sequence number (ReadAt, Scan) or time (SeekTime) that move no cursor.
// The topic alone writes to it, opens its cursors and closes it.
func (t *Topic) Log() *diskqueue.View { return t.log.View() }

// TopicStats is a snapshot of a topic.
type TopicStats struct {
	// Log is the log's state; its cursor fields are those of the channel
	// furthest behind.
	Log diskqueue.Stats
	// Puts and the rest count the topic's Puts: through the channels'
	// memory buffers, or to the log.
	Puts, ToMemory, ToLog, PutFailures int64
	// KeysPending and Duplicates are the key policy's (see
	// channel.FanoutStats); each channel counts what it dropped as
	// superseded in its Channel.Superseded.
	KeysPending int
	Duplicates  int64
	// Channels has one entry per channel, by name.
	Channels []ChannelStats
}

// ChannelStats is a snapshot of one channel of a topic.
type ChannelStats struct {
	Name string
	// Open says the channel is open in this process ([Topic.Channel]); a
	// channel that is not still holds its messages in the log.
	Open bool
	// Cursor is the channel's place in the log. Its Depth is the channel's
	// lag in records: put to the log and not yet finished by it.
	Cursor diskqueue.CursorStats
	// Lag is how long ago the oldest record the channel has not finished
	// was put; zero when it has finished them all.
	Lag time.Duration
	// Timers is how many messages the channel keeps in its timer store
	// (dir's channels/NAME), which Cursor.Depth and Lag leave out: those
	// deferred and, since its last Close, what it held then (in flight,
	// requeued, in its memory buffer), which it delivers first when
	// opened again. A message the channel has not finished is counted in
	// one of Cursor.Depth and Timers (in both for the moment it moves
	// from the log to the timer store).
	Timers int64
	// DeadLetters is how many dead letters the channel's dead-letter
	// store holds ([Topic.DeadLetters]).
	DeadLetters int64
	// Channel is the channel's own state and counters, when Open.
	Channel channel.Stats
}

// Stats returns a snapshot of the topic and each of its channels. It reads
// one record per channel that is behind, to tell its lag in time.
func (t *Topic) Stats() TopicStats {
	fs := t.fan.Stats()
	st := TopicStats{Log: t.log.Stats(), Puts: fs.Puts, ToMemory: fs.ToMemory, ToLog: fs.ToLog, PutFailures: fs.PutFailures, KeysPending: fs.KeysPending, Duplicates: fs.Duplicates}
	t.openMu.Lock()
	open := maps.Clone(t.open)
	t.openMu.Unlock()
	for _, cur := range t.log.CursorStats() {
		cs := ChannelStats{Name: cur.Name, Cursor: cur}
		if cs.Cursor.Depth > 0 {
			if rec, err := t.log.ReadAt(cs.Cursor.ReadSeq); err == nil {
				cs.Lag = max(time.Since(rec.Time), 0)
			}
		}
		if oc, ok := open[cur.Name]; ok {
			cs.Open, cs.Channel, cs.Timers = true, oc.ch.Stats(), oc.timers.Depth()
			cs.DeadLetters = oc.dead.Len()
		} else {
			cs.Timers = t.closedTimerDepth(cur.Name)
			cs.DeadLetters = deadDepth(t.fs, deadLetterDir(t.dir, cur.Name))
		}
		st.Channels = append(st.Channels, cs)
	}
	return st
}

// closedTimerDepth is the depth of the timer store of a channel not open,
// read with a read-only view the first time it is asked for (a listing
// and the tail of its last segment) and kept until the channel opens. A
// store that cannot be read counts zero, and is read again next time.
func (t *Topic) closedTimerDepth(name string) int64 {
	t.openMu.Lock()
	n, ok := t.closedTimers[name]
	opening := t.openings[name]
	t.openMu.Unlock()
	if ok {
		return n
	}
	dir := filepath.Join(t.dir, ChannelsDir, name)
	if _, err := t.fs.Stat(dir); err != nil {
		return 0 // none yet: the channel never kept anything there
	}
	q, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{FS: t.fs})
	if err != nil {
		return 0
	}
	n = q.Depth()
	q.Close()
	t.openMu.Lock()
	if _, isOpen := t.open[name]; !isOpen && t.openings[name] == opening {
		t.closedTimers[name] = n
	}
	t.openMu.Unlock()
	return n
}

// Close closes every open channel (each keeps what it holds in memory in
// its timer store, or, a keyed message under KeyUnique or KeyReplace, in
// place in the log, so a graceful restart loses nothing), then the log.
// Calls blocked in Put return [channel.ErrClosed]; a second Close returns
// ErrClosed.
func (t *Topic) Close() error {
	t.opMu.Lock()
	defer t.opMu.Unlock()
	if t.closed {
		return channel.ErrClosed
	}
	t.closed = true
	t.openMu.Lock()
	open := maps.Clone(t.open)
	t.openMu.Unlock()
	errs := []error{t.fan.Close()}
	for name, oc := range open {
		if err := oc.ch.Close(); err != nil && !errors.Is(err, channel.ErrClosed) {
			errs = append(errs, fmt.Errorf("spillq: close channel %q: %w", name, err))
		}
	}
	if t.keep != nil {
		errs = append(errs, t.keep.close())
	}
	if err := t.log.Close(); err != nil {
		errs = append(errs, fmt.Errorf("spillq: close topic: %w", err))
	}
	return errors.Join(errs...)
}
