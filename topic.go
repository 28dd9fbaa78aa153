package spillq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// chans are the channels open in this process, and what the topic
	// keeps of them between openings.
	chans *channelSet

	// keep stores the key state and compacts; nil when there is neither.
	keep *keeper
	comp *compactor
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
	if err := vfs.MkdirAllSynced(fsys, filepath.Join(dir, ChannelsDir), modesOf(dopts).dir); err != nil {
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
		chans: newChannelSet(),
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

// KeyState returns a snapshot of the topic's key policy state (what it
// stores every second), and whether it has one.
func (t *Topic) KeyState() (channel.KeyState, bool) { return t.fan.KeyState() }

// Log returns a read-only view of the topic's log: its Stats, its
// segments, its cursors' (one per channel) CursorStats, and lookups by
// sequence number (ReadAt, Scan) or time (SeekTime) that move no cursor.
// The topic alone writes to it, opens its cursors and closes it.
func (t *Topic) Log() *diskqueue.View { return t.log.View() }

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
	open := t.chans.snapshot()
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
