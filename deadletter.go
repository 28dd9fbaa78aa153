package spillq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// DeadDir is the subdirectory that holds a channel's dead-letter store: a
// disk queue of its own, in a queue's directory and in each topic
// channel's timer store directory (channels/NAME/dead), of dead-letter
// records (FORMAT.md, "Dead-letter store").
const DeadDir = "dead"

// ErrNoDeadLetter is returned by [DeadLetters.Get] for an ID the store does
// not hold.
var ErrNoDeadLetter = errors.New("spillq: no such dead letter")

// redriveBatch is how many dead letters Redrive puts back per sync of the
// channel's store (and Purge acknowledges per pass).
const redriveBatch = 256

// DeadLetters is a channel's dead-letter store: every message it
// dead-letters (out of attempts, failed, expired) is kept there, with why,
// until an operator redrives it (puts it back) or purges it. It is safe for
// concurrent use. Get one from [Queue.DeadLetters] or [Topic.DeadLetters].
//
// A message is stored durably (fsynced) before its channel acknowledges
// its record, so a crash in between never loses it: the message comes
// back, and when it is dead-lettered again the store, which keeps the IDs
// of the letters it holds, stores nothing more. A message is listed once
// however many crashes come between its letter and its acknowledgement.
// The IDs cost memory, about 20 to 40 bytes per letter held, and are read
// from the store when it opens: a read of all its records, which adds
// about a second per million letters to the open of a queue or channel
// (BenchmarkOpenDeadLetters: 0.1 s for 100,000 of 200 bytes).
type DeadLetters struct {
	store *deadStore // the store's disk queue, with Put durable on return and out-of-order Ack
	ids   *deadIDs   // the messages the store holds letters of
	// maxRecord is q's record limit: a long error text is cut to fit.
	maxRecord int
	// putBack is the channel's PutBack, set once the channel is made.
	putBack func(ctx context.Context, msgs []*channel.Message) []error
	// opMu serialises Redrive and Purge: two redrives of one letter at
	// once would put it back twice.
	opMu sync.Mutex
	// own is set on a store OpenDeadLetters opened, which its caller
	// closes; topicLock is the lock it holds of the store's topic, if the
	// store is a topic channel's.
	own       bool
	topicLock io.Closer
}

// deadOptions derives the dead-letter store's options from the log's (o,
// whose MaxRecordBytes is already a record's limit): a timer store's, with
// room for a letter's header and error text beside the body, and no
// minimum. Its Put syncs (deadStore), so the store needs no
// sync policy of its own.
func deadOptions(o diskqueue.Options) diskqueue.Options {
	d := timerOptions(o)
	d.SyncEvery = math.MaxInt
	d.MinRecordBytes = 0
	limit := o.MaxRecordBytes
	if limit == 0 {
		limit = diskqueue.DefaultMaxRecordBytes
	}
	d.MaxRecordBytes = min(limit+deadFixedSize+MaxDeadErrorBytes, diskqueue.MaxRecordBytesLimit)
	return d
}

// openDeadLetters opens the dead-letter store in dir, and reads the IDs of
// the letters it holds.
func openDeadLetters(dir string, logOpts diskqueue.Options) (*DeadLetters, error) {
	o := deadOptions(logOpts)
	q, err := diskqueue.Open(dir, o)
	if err != nil {
		return nil, fmt.Errorf("spillq: dead-letter store: %w", err)
	}
	d := &DeadLetters{store: newDeadStore(q), ids: newDeadIDs(), maxRecord: o.MaxRecordBytes}
	for dl, err := range d.list(context.Background(), 0, math.MaxUint64, DeadFilter{}) {
		if errors.Is(err, ErrNotDeadLetter) {
			continue // no ID: no letter to keep once
		}
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("%w (reading the IDs of its letters)", err)
		}
		d.ids.add(dl.ID)
	}
	return d, nil
}

// Add stores m as a dead letter, with reason; it returns once the letter
// is durable. It is the dead-letter handler a channel with a store uses
// when its options name none (Options.DeadLetter), and one of your own can
// call it too, to keep the letter as well as do what it does.
//
// Add is idempotent per message ID: if the store holds a letter of m.ID
// already (its message came back after a crash cut its dead-lettering
// short, before its channel acknowledged it), Add stores nothing and
// returns nil, and the store keeps the letter it has. Once that letter is
// redriven or purged, a dead-lettering of the message stores a new one.
func (d *DeadLetters) Add(m *channel.Message, reason error) error {
	if !d.ids.begin(m.ID) {
		return nil
	}
	err := d.add(m, reason)
	d.ids.end(m.ID, err == nil)
	return err
}

func (d *DeadLetters) add(m *channel.Message, reason error) error {
	dl := DeadLetter{ID: m.ID, Key: m.Key, Body: m.Body, PutAt: m.Timestamp, DeadAt: time.Now(), Attempts: m.Attempts, Reason: deadReason(reason)}
	if reason != nil {
		dl.Error = reason.Error()
	}
	// Background: the channel waits for its handler at Close, and a store
	// without room refuses at once (no BlockWhenFull), the message kept.
	if _, err := d.store.Put(context.Background(), appendDeadRecord(nil, &dl, d.maxRecord)); err != nil {
		return fmt.Errorf("spillq: dead-letter store: %w", err)
	}
	return nil
}

// Len returns how many dead letters the store holds.
// Nil-safe: 0 for a store turned off.
func (d *DeadLetters) Len() int64 {
	if d == nil {
		return 0
	}
	return d.store.Depth()
}

// DeadFilter selects dead letters: those whose ID is one of IDs (if any
// are given) and whose DeadAt is within [Since, Until) (a zero bound is
// none). The zero DeadFilter selects them all.
type DeadFilter struct {
	IDs   []channel.ID
	Since time.Time
	Until time.Time
}

func (f DeadFilter) all() bool { return len(f.IDs) == 0 && f.Since.IsZero() && f.Until.IsZero() }

// Match reports whether f selects dl.
func (f DeadFilter) Match(dl *DeadLetter) bool {
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, dl.ID) {
		return false
	}
	if !f.Since.IsZero() && dl.DeadAt.Before(f.Since) {
		return false
	}
	return f.Until.IsZero() || dl.DeadAt.Before(f.Until)
}

// List returns the dead letters f selects, oldest first. A record that is
// not a dead letter (damaged, or written by a later version) is yielded as
// an error wrapping [ErrNotDeadLetter], with its Seq in the DeadLetter;
// the listing goes on if the caller does. Key and Body are the caller's.
// To list a store while its service runs, from another process, use
// [ListDeadLetters].
func (d *DeadLetters) List(ctx context.Context, f DeadFilter) iter.Seq2[DeadLetter, error] {
	return d.list(ctx, 0, math.MaxUint64, f)
}

// list is List of the records with from <= seq < to.
func (d *DeadLetters) list(ctx context.Context, from, to uint64, f DeadFilter) iter.Seq2[DeadLetter, error] {
	return letters(ctx, d.store.q, from, to, f, false)
}

// Get returns the oldest dead letter of message id, or ErrNoDeadLetter.
func (d *DeadLetters) Get(ctx context.Context, id channel.ID) (DeadLetter, error) {
	for dl, err := range d.List(ctx, DeadFilter{IDs: []channel.ID{id}}) {
		if err == nil {
			return dl, nil
		}
		if !errors.Is(err, ErrNotDeadLetter) {
			return DeadLetter{}, err
		}
	}
	return DeadLetter{}, fmt.Errorf("%w: %s", ErrNoDeadLetter, id)
}

// Redrive puts the dead letters f selects, of those stored when it
// begins, back in their channel, oldest first, each with its ID, key, body and first put time and its attempts
// reset (see [channel.Channel.PutBack]), and removes each from the store
// once its channel has it durably: a crash in between has it both put back
// and still here (redriven twice if redriven again), never lost. It
// returns how many it put back.
//
// A letter the channel refuses stays in the store: one its key policy
// refuses (channel.ErrDuplicate: under KeyUnique another message with its
// key is pending; under KeyDedup another was put with its key within the
// window), and one too large for the channel's record limit
// (channel.ErrTooLarge: the queue opened with a smaller Disk.MaxRecordBytes
// than the one that stored it). Redrive goes on past them and returns an
// error wrapping the first such error and counting them. Any other error
// stops it.
func (d *DeadLetters) Redrive(ctx context.Context, f DeadFilter) (int, error) {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	if d.own {
		return 0, ErrNoChannel
	}
	if d.putBack == nil {
		return 0, fmt.Errorf("spillq: redrive: %w", channel.ErrClosed)
	}
	n, refused := 0, 0
	var firstRefusal error
	// Only the letters stored before it began: a message redriven that
	// fails again at once comes back as a new letter, which a Redrive
	// reading to the end would put back again, for ever.
	from, end := uint64(0), d.store.q.NextSeq()
	for {
		var seqs []uint64
		var msgs []*channel.Message
		for dl, err := range d.list(ctx, from, end, f) {
			if err != nil {
				if errors.Is(err, ErrNotDeadLetter) {
					continue // not one to put back; Purge removes it
				}
				return n, err
			}
			from = dl.Seq + 1
			seqs = append(seqs, dl.Seq)
			msgs = append(msgs, &channel.Message{ID: dl.ID, Key: dl.Key, Body: dl.Body, Timestamp: dl.PutAt})
			if len(msgs) == redriveBatch {
				break
			}
		}
		if len(msgs) == 0 {
			break
		}
		// Uncounted before they go back: a message redriven may be
		// dead-lettered again before its old letter is acknowledged,
		// and that is a new letter to store.
		for _, m := range msgs {
			d.ids.remove(m.ID)
		}
		moved, err := d.moved(msgs, seqs, d.putBack(ctx, msgs), &refused, &firstRefusal)
		n += moved
		if err != nil {
			return n, err
		}
	}
	if refused > 0 {
		return n, fmt.Errorf("spillq: redrive: the channel refused %d dead letters, kept in the store; the first: %w", refused, firstRefusal)
	}
	return n, nil
}

// moved acknowledges the letters whose messages the channel took back
// (errs[i] nil) and counts those it refused, which stay. It stops at an
// acknowledgement that fails or an error of another kind; every letter
// that stays in the store has its ID counted again. It returns how many
// letters it acknowledged.
func (d *DeadLetters) moved(msgs []*channel.Message, seqs []uint64, errs []error, refused *int, firstRefusal *error) (int, error) {
	n, i := 0, 0
	defer func() {
		for _, m := range msgs[i:] {
			d.ids.add(m.ID)
		}
	}()
	for ; i < len(msgs); i++ {
		switch err := errs[i]; {
		case err == nil:
			if aerr := d.store.Ack(seqs[i]); aerr != nil {
				return n, fmt.Errorf("spillq: redrive: message %s is back in its channel, its dead letter stays (redriven again, it comes twice): %w", msgs[i].ID, aerr)
			}
			n++
		case errors.Is(err, channel.ErrDuplicate) || errors.Is(err, channel.ErrTooLarge) || errors.Is(err, channel.ErrTooSmall):
			d.ids.add(msgs[i].ID)
			*refused++
			if *firstRefusal == nil {
				*firstRefusal = fmt.Errorf("message %s: %w", msgs[i].ID, err)
			}
		default:
			return n, fmt.Errorf("spillq: redrive: message %s: %w", msgs[i].ID, err)
		}
	}
	return n, nil
}

// Purge removes the dead letters f selects (of those stored when it
// begins) for good, and returns how many
// it removed. The zero DeadFilter removes records that are not dead
// letters too (damaged, or of a later version). A crash (or, for the last
// second's, a power cut) may bring back letters purged just before it.
func (d *DeadLetters) Purge(ctx context.Context, f DeadFilter) (int, error) {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	n, from, end := 0, uint64(0), d.store.q.NextSeq()
	for {
		// A batch, then its acknowledgements: not under the scan, whose
		// segment the last of them may delete.
		var seqs []uint64
		var ids []channel.ID
		var bad []bool // the record is not a letter: no ID of its own
		for dl, err := range d.list(ctx, from, end, f) {
			if err != nil {
				if !errors.Is(err, ErrNotDeadLetter) {
					return n, err
				}
				if !f.all() {
					continue
				}
			}
			from = dl.Seq + 1
			ids, bad = append(ids, dl.ID), append(bad, err != nil)
			if seqs = append(seqs, dl.Seq); len(seqs) == redriveBatch {
				break
			}
		}
		if len(seqs) == 0 {
			return n, nil
		}
		for i, seq := range seqs {
			// Uncounted first: a dead-lettering of the message from
			// now on is a letter to keep, which this Purge (reading
			// only what was stored when it began) leaves.
			if !bad[i] {
				d.ids.remove(ids[i])
			}
			if err := d.store.Ack(seq); err != nil {
				if !bad[i] {
					d.ids.add(ids[i])
				}
				return n, fmt.Errorf("spillq: purge: %w", err)
			}
			n++
		}
	}
}

// close closes the store; the channel has stopped using it.
func (d *DeadLetters) close() error {
	if d == nil {
		return nil
	}
	d.opMu.Lock()
	d.putBack = nil
	d.opMu.Unlock()
	return d.store.Close()
}

// queueDeadLetters opens a queue's dead-letter store in dir's DeadDir,
// unless opts turns it off, and makes it chOpts' handler if opts names
// none.
func queueDeadLetters(dir string, logOpts diskqueue.Options, opts Options, chOpts *channel.Options) (*DeadLetters, error) {
	if opts.DiscardDeadLetters {
		return nil, nil
	}
	dead, err := openDeadLetters(filepath.Join(dir, DeadDir), logOpts)
	if err != nil {
		return nil, err
	}
	if chOpts.DeadLetter == nil {
		chOpts.DeadLetter = dead.Add
	}
	return dead, nil
}

// setChannel gives the store the channel Redrive puts letters back in.
// Nil-safe, as close, for a store turned off.
func (d *DeadLetters) setChannel(ch *channel.Channel) {
	if d == nil {
		return
	}
	d.opMu.Lock()
	d.putBack = ch.PutBack
	d.opMu.Unlock()
}

// DeadLetters returns the queue's dead-letter store, or nil if
// Options.DiscardDeadLetters turned it off.
func (q *Queue) DeadLetters() *DeadLetters { return q.dead }

// channelDeadLetters opens the dead-letter store of a topic's channel, as
// queueDeadLetters does a queue's.
func channelDeadLetters(topicDir, name string, logOpts diskqueue.Options, opts ChannelOptions, chOpts *channel.Options) (*DeadLetters, error) {
	return queueDeadLetters(filepath.Join(topicDir, ChannelsDir, name), logOpts, Options{DiscardDeadLetters: opts.DiscardDeadLetters}, chOpts)
}

// DeadLetters returns the dead-letter store of the topic's channel name,
// open in this process ([Topic.Channel]); nil if its
// ChannelOptions.DiscardDeadLetters turned it off. A channel not open
// returns an error wrapping [diskqueue.ErrNotFound]: open it first (its
// store is read, redriven and purged with it open; ChannelStats counts its
// letters either way).
func (t *Topic) DeadLetters(name string) (*DeadLetters, error) {
	oc, ok := t.chans.get(name)
	if !ok {
		return nil, fmt.Errorf("spillq: dead letters of channel %q: %w: the channel is not open in this process", name, diskqueue.ErrNotFound)
	}
	return oc.dead, nil
}

// ErrNoChannel is returned by Redrive on a store opened by itself
// ([OpenDeadLetters]): there is no channel to put its letters back in.
var ErrNoChannel = errors.New("spillq: the dead-letter store was opened without its channel; redrive through spillq.Open or Topic.Channel")

// OpenDeadLetters opens the dead-letter store in dir by itself (a queue's
// DIR/dead, a topic channel's DIR/channels/NAME/dead), for a tool: Len,
// List, Get and Purge work, Redrive returns [ErrNoChannel]. It takes the
// store's lock, and a topic channel's store the topic's lock too, so it
// fails with [diskqueue.ErrLocked] while the store's queue or topic is
// open (in this process or another), whether the channel is or not: a
// topic counts the letters of its closed channels once, and keeps the
// count until the channel opens ([Topic.Stats]). Close it when done. To
// read the store while a service runs, use [ListDeadLetters].
func OpenDeadLetters(dir string) (*DeadLetters, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("spillq: dead-letter store: %w", err)
	}
	var topicLock io.Closer
	if topic, ok := deadStoreTopic(dir); ok {
		var err error
		if topicLock, err = vfs.OS.Lock(filepath.Join(topic, topicLockFile), 0o600); err != nil {
			return nil, fmt.Errorf("spillq: dead-letter store: its topic %s: %w", topic, err)
		}
	}
	d, err := openDeadLetters(dir, diskqueue.Options{})
	if err != nil {
		if topicLock != nil {
			topicLock.Close()
		}
		return nil, err
	}
	d.own, d.topicLock = true, topicLock
	return d, nil
}

// topicLockFile is the lock file of a log's directory (FORMAT.md,
// "Directory": flock'd while a queue or log has it open), which a topic
// holds while it is open.
const topicLockFile = "LOCK"

// deadStoreTopic returns the topic whose channel's store dir is
// (TOPIC/channels/NAME/dead, TOPIC holding channels/ as every topic does),
// and false for any other store (a queue's).
func deadStoreTopic(dir string) (string, bool) {
	dir = filepath.Clean(dir)
	channels := filepath.Dir(filepath.Dir(dir))
	if filepath.Base(dir) != DeadDir || filepath.Base(channels) != ChannelsDir {
		return "", false
	}
	if info, err := os.Stat(channels); err != nil || !info.IsDir() {
		return "", false
	}
	return filepath.Dir(channels), true
}

// Close closes a store [OpenDeadLetters] opened. A queue's or a channel's
// store is closed with it: Close of one returns an error, and does nothing.
func (d *DeadLetters) Close() error {
	if !d.own {
		return errors.New("spillq: a queue's dead-letter store closes with the queue")
	}
	err := d.close()
	if d.topicLock != nil {
		err = errors.Join(err, d.topicLock.Close())
		d.topicLock = nil
	}
	return err
}

// DecodeDeadLetter decodes a record of a dead-letter store (FORMAT.md,
// "Dead-letter store"), for tools that read the store's disk queue
// directly ([ListDeadLetters] does it for them). Key and Body alias
// record; Seq is not set. A record that is not a dead letter returns an
// error wrapping [ErrNotDeadLetter].
func DecodeDeadLetter(record []byte) (DeadLetter, error) { return decodeDeadRecord(record) }
