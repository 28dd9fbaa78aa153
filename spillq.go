// Package spillq is an embeddable durable work queue: an NSQ-style channel
// whose bounded memory buffer spills to a checksummed, indexed disk log.
//
//	q, err := spillq.Open("/var/lib/myservice/jobs", spillq.Options{})
//	...
//	q.Put(ctx, job)
//	m, err := q.Receive(ctx)
//	... work ...
//	m.Finish()
//
// [Open] returns a [Queue]: a channel (delivery, acknowledgement, requeue,
// deferral; see package channel) over a durable disk log (see package
// diskqueue), of which it offers what a program using a queue calls. Use
// the two packages directly to pair the channel with another backend or
// the log with another consumer.
//
// [OpenTopic] returns a [Topic]: one log read by any number of named,
// durable channels ([Topic.Channel] returns a [Channel]), each message
// written once and delivered to every channel (nsqd's topic, without a
// copy per channel).
package spillq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// Options configures [Open]. The zero value is valid; each field says what
// zero means.
type Options struct {
	// MemQueueSize is how many messages may wait in memory before new ones
	// go to disk. Messages in memory are lost if the process crashes, and
	// so are those in flight that were delivered from memory, which have
	// no record on disk (Close writes both to disk). So zero, the default,
	// sends every message through the disk log, where Disk's sync policy
	// decides durability.
	MemQueueSize int

	// MsgTimeout is how long a delivered message may stay unfinished before
	// it is delivered again. Zero means 60 seconds.
	MsgTimeout time.Duration

	// MaxAttempts bounds deliveries per message; past it the message goes
	// to DeadLetter. Zero means unlimited. With MaxAttempts, each delivery
	// is counted in a delivery journal in dir's [DeliveriesDir] before the
	// message goes out, so the count survives a crash: a message whose
	// handler kills the process is dead-lettered after MaxAttempts of
	// them (see channel.Options.Deliveries; a power cut may lose the
	// counts of the last SyncInterval). Without, a crash restarts the
	// count from the one the message's record carries.
	MaxAttempts uint16

	// DeadLetter receives messages out of attempts, failed
	// (channel.Message.Fail) or expired, with the reason; the message's
	// record is acknowledged once it returns nil, and kept (tried again a
	// second later) if it returns an error. See
	// channel.Options.DeadLetter. Nil stores them in the queue's
	// dead-letter store ([Queue.DeadLetters], in dir's [DeadDir]), to be
	// listed, redriven or purged; a handler of your own replaces the
	// store's, and may call [DeadLetters.Add] to keep the letter as well.
	DeadLetter func(m *channel.Message, reason error) error

	// DiscardDeadLetters opens no dead-letter store: [Queue.DeadLetters]
	// is nil, and with no DeadLetter handler a dead letter is dropped,
	// logged at Warn to Logger (nil Logger discards). Letters stored
	// before stay on disk, untouched, until a run without it.
	DiscardDeadLetters bool

	// Disk configures the disk log. Its zero value is nsqd's policy:
	// 100 MiB segments, fsync every 2500 records or 2 seconds; a message
	// Put to disk is in the kernel when Put returns, so it survives a crash
	// of the process, and one finished is not delivered again after it. Set
	// Disk.SyncEvery to 1 for Put to return only once the message is on
	// stable storage, and Disk.Compress to snappy-compress spilled bodies.
	//
	// Disk.MaxRecordBytes and Disk.MinRecordBytes bound the message body
	// Put accepts (zero means 1 MiB and no minimum); Open sizes the log's
	// records to hold such a body in its envelope (up to
	// [channel.MaxEnvelopeOverhead] bytes more, so Disk.MaxRecordBytes goes
	// up to that much less than [diskqueue.MaxRecordBytesLimit]), and Put refuses a body out
	// of range with [channel.ErrTooLarge] or [channel.ErrTooSmall], even
	// when it would fit in memory.
	//
	// Disk.FileMode is the mode of every file Open makes in dir (the log,
	// the timer store, the key state), directories getting the same bits
	// plus search: 0600 and 0700 by default, the owner alone.
	//
	// Disk.FS, for this module's tests, puts every file Open reads or
	// writes in dir (the logs, the key state, the dead-letter store) on
	// that file system: a power-cut test runs the whole queue on one that
	// keeps only what was fsynced.
	Disk diskqueue.Options

	// MaxDeferredInMemory bounds how many deferred messages the queue
	// keeps track of in memory (16 bytes each); the others wait on disk
	// only, in the timer store, and are found again by reading it. Zero
	// means [channel.DefaultMaxDeferredInMemory]. See
	// channel.Options.MaxDeferredInMemory.
	MaxDeferredInMemory int

	// Keys, DedupWindow and DuplicatesOK choose the key policy for
	// messages put with a key (channel.PutOptions.Key); see
	// channel.Options. The state KeyUnique, KeyReplace and KeyDedup keep
	// (the keys pending, the newest message of each, the keys put within
	// the window) survives a restart and a crash: it is stored in dir's
	// [KeysDir] every second and at Close, and Open reads it back with the
	// records put since it was stored (FORMAT.md, "Key state"). Keys may
	// change between opens: Open builds the new policy's state from the
	// records not yet acknowledged (KeyDedup: those put within the
	// window), and warns if the stored state was another policy's (after
	// a run under KeyNone or KeySerial, which store none, the state the
	// run before stored is read back and brought up to date, as after a
	// crash). What the old policy decided stands (a Put it
	// refused is gone), what it would still have done does not: a version
	// a former KeyReplace superseded and the channel had not reached yet is
	// delivered.
	Keys         channel.KeyPolicy
	DedupWindow  time.Duration
	DuplicatesOK bool

	// CompactDirtyRatio starts a compaction in the background (see
	// [Queue.Compact]) once at least two sealed segments are on disk and
	// the sealed log bytes put since the last compaction are at least this
	// fraction of all of them, looked at every second (Kafka's
	// min.cleanable.dirty.ratio). It applies where compaction can remove
	// anything: under channel.KeyReplace, and with Disk.RetainBytes or
	// Disk.RetainAge. Zero means [DefaultCompactDirtyRatio] (0.5); a
	// negative ratio turns automatic compaction off (Compact still runs).
	CompactDirtyRatio float64

	// Logger receives warnings from both layers. Nil discards.
	Logger *slog.Logger
}

// Queue is a durable work queue in one directory: a channel (delivery,
// acknowledgement, requeue, deferral) over a disk log. Producers Put,
// PutWith or Enqueue (which returns the message's ID and its record's
// seq); consumers Receive (or ReceiveBatch, TryReceive, Messages, or a
// [Worker]) and answer each [Message] with Finish, Requeue, Touch, Release
// or Fail. Stats, Depth, Health, Pause, Empty, Compact, Replay,
// DeadLetters and read-only views of its logs (Disk, Timers) are for
// watching and running it; Close stores what it holds in memory. It is
// safe for concurrent use.
type Queue struct {
	verbs  // the channel, and the methods it shares with a topic's Channel
	disk   *diskqueue.Queue
	timers *diskqueue.Queue
	dead   *DeadLetters // nil with Options.DiscardDeadLetters
	comp   *compactor   // nil when compaction removes nothing
	// backend is closed by the channel's Close.
	backend *queueCloser
}

// Open opens (or creates) the queue in dir and delivers again whatever was
// stored there and not finished.
//
// Deferred messages (put or requeued with a delay) are kept apart, in a
// second disk queue in dir's [TimersDir] subdirectory, so none holds a
// segment of the main log (see channel.Options.Timers). Open reads that
// store through, in the background, to find when each is due: a cost of
// the number deferred, never of the backlog. A queue written before the
// timer store existed opens as it is; its deferred messages move to the
// timer store as the channel reads them. The timer store takes the Disk
// options but for retention, BlockWhenFull (a deferral that finds it full
// waits in memory instead, its record in the main log), and segments of at
// most 4 MiB; MaxDiskBytes caps each of the two separately.
//
// A directory of another kind is refused with an error wrapping
// [diskqueue.ErrInvalidOptions], nothing in it changed: a topic's (open it
// with [OpenTopic]), and a log whose oldest unacknowledged records (up to
// 8) are none of them channel messages, such as one written with the
// diskqueue package directly, whose every record the channel would
// otherwise count bad and drop. OpenTopic refuses the same.
//
// Invalid options are refused with an error wrapping
// [diskqueue.ErrInvalidOptions] for the Disk options and
// CompactDirtyRatio, and [channel.ErrInvalidOptions] for the channel's
// (MemQueueSize, MsgTimeout, Keys, DedupWindow and the like).
func Open(dir string, opts Options) (*Queue, error) {
	if fi, err := vfs.Or(opts.Disk.FS).Stat(filepath.Join(dir, ChannelsDir)); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("spillq: %w: %s is a topic's directory (it has %s/); open it with OpenTopic", diskqueue.ErrInvalidOptions, dir, ChannelsDir)
	}
	dopts, maxBody, err := logOptions(opts.Disk, opts.Logger)
	if err != nil {
		return nil, err
	}
	if err := checkDirtyRatio(opts.CompactDirtyRatio); err != nil {
		return nil, err
	}
	chOpts := channel.Options{
		MemQueueSize:        opts.MemQueueSize,
		Keys:                opts.Keys,
		DedupWindow:         opts.DedupWindow,
		DuplicatesOK:        opts.DuplicatesOK,
		MaxDeferredInMemory: opts.MaxDeferredInMemory,
		MsgTimeout:          opts.MsgTimeout,
		MaxAttempts:         opts.MaxAttempts,
		DeadLetter:          opts.DeadLetter,
		Logger:              opts.Logger,
	}
	// Before the directory is made: options refused leave nothing behind.
	if err := chOpts.Check(); err != nil {
		return nil, fmt.Errorf("spillq: %w", err)
	}
	topts := timerOptions(dopts)
	// The key state's rebuild reads the records after the state stored
	// last: none may go before it has (HoldFrom below). Under KeyDedup
	// it reads the timer store's too.
	dopts.HoldAtOpen = keepsKeyState(opts.Keys)
	topts.HoldAtOpen = opts.Keys == channel.KeyDedup
	dq, err := diskqueue.Open(dir, dopts)
	if err != nil {
		return nil, openErr(err, maxBody)
	}
	if err := notMessages(dir, dq.Log); err != nil {
		dq.Close()
		return nil, err
	}
	tq, err := diskqueue.Open(filepath.Join(dir, TimersDir), topts)
	if err != nil {
		dq.Close()
		return nil, fmt.Errorf("spillq: timer store: %w", err)
	}
	dead, err := queueDeadLetters(dir, dopts, opts, &chOpts)
	if err != nil {
		tq.Close()
		dq.Close()
		return nil, err
	}
	backend := &queueCloser{q: dq, dead: dead}
	var keyState *channel.KeyState
	logger := orDiscard(dopts.Logger)
	saveKeys := keepsKeyState(opts.Keys)
	if saveKeys {
		if keyState, err = loadKeyState(dir, modesOf(dopts), dq, tq, opts.Keys, opts.DedupWindow, logger); err != nil {
			dead.close()
			tq.Close()
			dq.Close()
			return nil, err
		}
	}
	comp := newCompactor(dq, opts.Keys == channel.KeyReplace, opts.Disk, opts.CompactDirtyRatio, logger)
	var keep *keeper
	if saveKeys || comp != nil {
		keep = &keeper{dir: dir, modes: modesOf(dopts), logger: logger, comp: comp}
		backend.keep = keep
	}
	chOpts.Backend = channel.Store{Log: dq.Log, Cursor: dq.OwnCursor(), Close: backend.Close}
	chOpts.KeyState = keyState
	chOpts.Timers = DiskTimers(tq)
	jq, err := openDeliveries(dir, topts, opts.MaxAttempts)
	if err != nil {
		dead.close()
		tq.Close()
		dq.Close()
		return nil, err
	}
	chOpts.Deliveries = deliveries(jq)
	ch, err := channel.New(chOpts)
	if err != nil {
		closeQueue(jq)
		dead.close()
		tq.Close()
		dq.Close()
		return nil, fmt.Errorf("spillq: %w", err)
	}
	if keep != nil {
		if saveKeys {
			keep.state = func() (keyFile, bool) {
				// The mark first: a deferral stored between the two is
				// in the snapshot and read again at a restart, which
				// holds it once.
				mark := tq.NextSeq()
				st, ok := ch.KeyState()
				return keyFile{KeyState: st, timerMark: mark}, ok
			}
			keep.hold = func(st keyFile) {
				dq.HoldFrom(st.Watermark)
				if topts.HoldAtOpen {
					tq.HoldFrom(st.timerMark)
				}
			}
			keep.pressure = dq.HoldPressure()
			if topts.HoldAtOpen {
				keep.timerPressure = tq.HoldPressure()
			}
			// The timer store too: a KeyDedup state names keys whose
			// message waits there. At Close it is closed, fsynced, before
			// the last state is stored.
			keep.sync = func(ctx context.Context) error {
				terr := tq.Sync(ctx)
				if errors.Is(terr, diskqueue.ErrClosed) {
					terr = nil
				}
				return errors.Join(dq.Sync(ctx), terr)
			}
			keep.changes = func() [4]int64 {
				cs := ch.Stats()
				// The timer store's writes too: requeues with a delay
				// alone move no other counter, and under KeyDedup each
				// store moves the timer store's hold.
				return [4]int64{cs.Puts, cs.Finishes + cs.DeadLetters, cs.Superseded, int64(tq.NextSeq())}
			}
		}
		if comp != nil {
			comp.compacted, comp.nextRead = ch.Compacted, dq.NextRead
		}
		keep.start()
	}
	dead.setChannel(ch)
	return &Queue{verbs: verbs{ch}, disk: dq, timers: tq, dead: dead, comp: comp, backend: backend}, nil
}

// envelopeSample is how many of the oldest records not yet acknowledged
// Open decodes to tell a channel's log from one written another way.
const envelopeSample = 8

// notMessages refuses a log whose oldest unacknowledged records are none of
// them channel messages: a directory written with diskqueue directly (or
// by another program) opened by Open or OpenTopic, whose channel would
// count every record bad, acknowledge it and drop it. One record of the
// sample that decodes is enough: damage hits records, not whole logs.
func notMessages(dir string, l *diskqueue.Log) error {
	from := l.Floor()
	n, looked, bad := 0, 0, error(nil)
	for rec, err := range l.Scan(from, l.NextSeq()) {
		// A long damaged stretch is not read through at Open: damage is
		// not a sign of another kind of log either way.
		if looked++; looked > 4*envelopeSample {
			break
		}
		if err != nil {
			if errors.Is(err, diskqueue.ErrCorrupt) || errors.Is(err, diskqueue.ErrCompacted) {
				continue
			}
			return fmt.Errorf("spillq: open: %w", err)
		}
		if _, derr := channel.UnmarshalMessage(rec.Body); derr == nil {
			return nil
		} else if bad == nil {
			bad = derr
		}
		if n++; n == envelopeSample {
			break
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("spillq: %w: %s holds records that are not channel messages (none of the %d from seq %d decodes: %v); a log written with the diskqueue package is opened with diskqueue.Open or diskqueue.OpenLog", diskqueue.ErrInvalidOptions, dir, n, from, bad)
}

// maxBodyLimit is the largest Disk.MaxRecordBytes: the log's limit less
// the room a body's envelope takes.
const maxBodyLimit = diskqueue.MaxRecordBytesLimit - channel.MaxEnvelopeOverhead

// logOptions turns the caller's disk options, whose record limits are on
// message bodies, into the log's, whose limits are on records: bodies in
// their envelopes. It returns the body limit too, for error messages.
func logOptions(o diskqueue.Options, logger *slog.Logger) (diskqueue.Options, int, error) {
	if o.Logger == nil {
		o.Logger = logger
	}
	maxBody := o.MaxRecordBytes
	if maxBody == 0 {
		maxBody = diskqueue.DefaultMaxRecordBytes
	}
	minBody := o.MinRecordBytes
	if _, _, err := o.Modes(); err != nil { // before Open or OpenTopic makes a directory
		return o, 0, fmt.Errorf("spillq: %w", err)
	}
	switch {
	case maxBody < 0 || maxBody > maxBodyLimit:
		return o, 0, fmt.Errorf("spillq: %w: Disk.MaxRecordBytes %d is outside [0, %d] (the log's limit, %d, less the message envelope's %d)", diskqueue.ErrInvalidOptions, maxBody, maxBodyLimit, diskqueue.MaxRecordBytesLimit, channel.MaxEnvelopeOverhead)
	case minBody < 0 || minBody > maxBody:
		return o, 0, fmt.Errorf("spillq: %w: Disk.MinRecordBytes %d is outside [0, MaxRecordBytes=%d]", diskqueue.ErrInvalidOptions, minBody, maxBody)
	}
	// The channel refuses bodies out of range before they reach the log
	// (it reads the Log's record limits), so the log's own limits only
	// have to let every envelope of a body in range through.
	o.MaxRecordBytes = maxBody + channel.MaxEnvelopeOverhead
	if minBody > 0 {
		o.MinRecordBytes = minBody + channel.MinEnvelopeOverhead
	}
	return o, maxBody, nil
}

// openErr wraps an error opening the log, explaining the record limit
// where the error is about it (Open raised the limits by the envelope).
func openErr(err error, maxBody int) error {
	if errors.Is(err, diskqueue.ErrInvalidOptions) && strings.Contains(err.Error(), "RecordBytes") {
		return fmt.Errorf("spillq: %w (Disk.MaxRecordBytes %d is the body limit; records on disk are up to %d bytes longer)", err, maxBody, channel.MaxEnvelopeOverhead)
	}
	return fmt.Errorf("spillq: %w", err)
}

// Disk returns a read-only view of the disk log: its Stats, its segments,
// and lookups by sequence number (ReadAt, Scan) or time (SeekTime) that
// move no cursor, for watching the queue and for [Queue.Replay]. The
// queue alone writes, reads and closes the log.
func (q *Queue) Disk() *diskqueue.View { return q.disk.View() }

// Timers returns a read-only view of the timer store, the disk queue of
// the deferred messages (in dir's [TimersDir]), for its Stats and Depth.
func (q *Queue) Timers() *diskqueue.View { return q.timers.View() }

// DiskBackend is a disk queue as a channel's store: its Log, its own
// cursor ([diskqueue.Queue.OwnCursor]) and its Close, for
// channel.Options.Backend (or Timers, see [DiskTimers]). The channel takes
// ownership of it; q must not have been read from. Pair it with
// [DiskTimers] over a second disk queue for deferred messages that hold no
// record in q (as [Open] does); without, a deferred message read from q
// waits in memory, its record kept until it is finished.
//
// The channel reads q's record limits (Options.MaxRecordBytes and
// MinRecordBytes) and refuses at Put a body whose envelope would not fit
// them (up to [channel.MaxEnvelopeOverhead] bytes more than the body).
func DiskBackend(q *diskqueue.Queue) channel.Store {
	return channel.Store{Log: q.Log, Cursor: q.OwnCursor(), Close: q.Close}
}

// queueCloser is the Close of a queue's Backend: the channel's Close calls it
// after storing what it held, so the keeper (if any) stores the key state
// last, before the disk queue closes, and the queue's own methods learn
// it closed (closed).
type queueCloser struct {
	q      *diskqueue.Queue
	keep   *keeper // nil without key state or compaction
	closed atomic.Bool
	// dead is the dead-letter store (nil: Options.DiscardDeadLetters),
	// closed here: the channel calls its handler no more.
	dead *DeadLetters
}

func (b *queueCloser) Close() error {
	b.closed.Store(true)
	var err error
	if b.keep != nil {
		err = b.keep.close()
	}
	if b.dead != nil {
		err = errors.Join(err, b.dead.close())
	}
	return errors.Join(err, b.q.Close())
}
