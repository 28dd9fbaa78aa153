package channel

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configures a [Channel]. The zero value is valid: a memory-only
// channel with no buffer, whose Put waits for a consumer.
type Options struct {
	// MemQueueSize is how many messages the memory buffer holds (nsqd's
	// mem-queue-size); past it, messages go to the Backend. Messages in the
	// memory buffer are lost if the process crashes, and so are those in
	// flight that came from it, which have no backend record (Close
	// writes both to the backend), so the buffer is opt-in: zero means none, and with a
	// Backend every message goes through it and the backend's sync policy
	// alone decides durability. Without a Backend, zero makes Put hand each
	// message straight to a waiting consumer. Negative is invalid.
	MemQueueSize int

	// Backend is where messages go when memory is full, and where Close
	// writes the messages still in memory: a Log the channel appends to
	// and a Cursor over it the channel reads (spillq.Open's is its disk
	// queue, [diskqueue.Queue.OwnCursor] over its Log). The zero Store
	// keeps the channel in memory only. [New] takes ownership: Close calls
	// its Close.
	//
	// New refuses, with [ErrInvalidOptions], what a Backend cannot carry
	// (see [Log]): over one that does not number its records (the
	// go-diskqueue adapter), KeyUnique, KeyReplace, KeyDedup and
	// Deliveries. Without Timers, a deferred message read from the Backend
	// waits in memory, its record kept until it is finished; New does not
	// read the backlog for the deferred messages in it, which count in
	// Stats.DiskDepth until the channel reads them and in Stats.Deferred
	// from then on.
	Backend Store

	// Timers is the timer store, where deferred messages wait, so that
	// none holds a record in the Backend (but the keyed ones the Deferral
	// section of the package doc names); it needs a Backend, and a Log
	// that numbers its records, which the channel reads by seq. The
	// channel is its only writer and reader; [New] takes ownership: Close
	// calls its Close, after its last write. The zero Store keeps deferred
	// messages in memory whole until their due time, each holding its
	// Backend record (if it has one) unacknowledged until it is finished,
	// and after a restart finds those in the backend only when it reads
	// them back.
	//
	// A message moved here (a Requeue with a delay, a deferred record
	// read from the Backend) has its Backend record acknowledged only once
	// a Sync of the timer store's Log covers the new record (one Sync for
	// the moves of a few milliseconds): without, a power cut could keep
	// the acknowledgement and lose the record. A crash between the two
	// leaves the message in both, to be delivered twice, never lost.
	Timers Store

	// Deliveries is the delivery journal: where, with MaxAttempts set,
	// the channel records each delivery of a message that has a record
	// (in the Backend or in Timers) before it hands the message out, so
	// that a crash keeps its attempts: after a restart the message comes
	// with at least as many as it was handed out, and one that killed the
	// process MaxAttempts times is dead-lettered rather than delivered
	// again. Its records are 12 bytes each, one per delivery,
	// acknowledged when the message's next delivery is recorded or its
	// record is (FORMAT.md, "Delivery journal"). It needs a Backend, and
	// it and the Backend must number their records. [New] takes
	// ownership: Close calls its Close. With MaxAttempts zero nothing is
	// written, and what a former run left is read and acknowledged as its
	// messages come.
	//
	// At New the channel reads what is left in it, keeping, for each
	// record, the most attempts counted. Entries for records the Backend's
	// (or Timers') Cursor reports acknowledged are dropped then; the
	// others go as their messages come. The zero Store: the attempts a
	// crash keeps are those a message's record carries (written by Close,
	// or by a deferral), so a crash restarts the count from there.
	Deliveries Store

	// MaxDeferredInMemory bounds how many deferred messages in the Timers
	// store the channel keeps track of in memory: the earliest due, about
	// 16 bytes each (due time and seq; the body stays on the store). The
	// others are found again by reading the store through once those are
	// used up: a read of every deferred message, so a bound much smaller
	// than the number deferred costs reads. Zero means
	// DefaultMaxDeferredInMemory (100,000). Ignored without Timers.
	MaxDeferredInMemory int

	// MsgTimeout is how long a delivered message may stay unfinished before
	// it is delivered again (nsqd's msg-timeout). Zero means 60 seconds.
	MsgTimeout time.Duration

	// MaxAttempts is how many deliveries a message gets. A message timed
	// out or requeued after its last attempt goes to DeadLetter instead,
	// and so does one whose attempts are used up when its turn comes
	// again (its record says so). A delivery cut short by
	// [Message.Release] or by Close is not counted. Zero means unlimited.
	// A crash keeps the count with Deliveries set (a message that killed
	// the process MaxAttempts times is dead-lettered); without, the
	// attempts a crash keeps are those the message's record carries, so
	// it restarts the count from there.
	MaxAttempts uint16

	// DeadLetter receives messages that ran out of attempts (reason wraps
	// ErrMaxAttempts, and the last attempt's error if [Message.Retry] gave
	// one), that a consumer failed ([Message.Fail]: ErrFailed and its
	// cause) or that expired before delivery (ErrExpired). The message's
	// record is acknowledged after DeadLetter returns nil: a crash before
	// then delivers it again (so a store it writes to may get it twice,
	// never lose it). If it returns an error the message is kept, its
	// record unacknowledged, and comes round again a second later (and so
	// to DeadLetter again, if out of attempts). It runs on the goroutine
	// that found it so (the channel's own, or a caller's of Receive,
	// Requeue or Fail), holding no lock of the channel's, and must not
	// block for long (Close waits for it); it may Put to the channel,
	// which returns ErrClosed once Close has begun. Nil drops the
	// message, logging it at Warn to Logger if one is set (the default
	// Logger discards); Stats counts it either way.
	DeadLetter func(m *Message, reason error) error

	// Keys is the key policy: what the channel does with the keys messages
	// carry (PutOptions.Key). Zero, KeyNone, carries them and enforces
	// nothing; see [KeyPolicy] for the others. On a topic's channel only
	// KeyNone and KeySerial apply: the others decide at Put, which is the
	// topic's.
	Keys KeyPolicy

	// DedupWindow is how long KeyDedup remembers a key once put. Zero means
	// DefaultDedupWindow (10 minutes). Keys restored from a KeyState are
	// remembered for the window in effect now, counted from when each was
	// put, whatever the window was then.
	DedupWindow time.Duration

	// KeyState is the key policy's state to start from (a restart), as
	// [Channel.KeyState] returned it before, brought up to date with the
	// records stored since its Watermark; nil starts with none. Its
	// Policy must be Keys.
	KeyState *KeyState

	// DuplicatesOK makes a Put that KeyUnique or KeyDedup refuses return
	// nil instead of ErrDuplicate: the message is dropped all the same and
	// counted in Stats.Duplicates.
	DuplicatesOK bool

	// FailWhenFull makes Put return ErrFull instead of waiting when the
	// memory buffer is full and there is no Backend. (With a Backend, a
	// full disk is the backend's to report or wait out.)
	FailWhenFull bool

	// Logger receives warnings (dead letters dropped, bad records, backend
	// errors); nothing is logged on the hot path. Failing backend reads
	// warn when they start, once a minute while they last, and when they
	// fail otherwise, at most every 10 s; an Info says when they succeed
	// again. Nil discards.
	Logger *slog.Logger
}

// Defaults documented on the Options fields.
const DefaultMsgTimeout = 60 * time.Second

func (o Options) withDefaults() (Options, error) {
	if o.MemQueueSize < 0 {
		return o, fmt.Errorf("%w: MemQueueSize %d is negative", ErrInvalidOptions, o.MemQueueSize)
	}
	if o.MsgTimeout < 0 {
		return o, fmt.Errorf("%w: MsgTimeout %v is negative", ErrInvalidOptions, o.MsgTimeout)
	}
	if o.MaxDeferredInMemory < 0 {
		return o, fmt.Errorf("%w: MaxDeferredInMemory %d is negative", ErrInvalidOptions, o.MaxDeferredInMemory)
	}
	if o.Keys > KeySerial {
		return o, fmt.Errorf("%w: Keys %v", ErrInvalidOptions, o.Keys)
	}
	var err error
	if o.DedupWindow, err = dedupWindow(o.DedupWindow); err != nil {
		return o, err
	}
	if o.MaxDeferredInMemory == 0 {
		o.MaxDeferredInMemory = DefaultMaxDeferredInMemory
	}
	if o.MsgTimeout == 0 {
		o.MsgTimeout = DefaultMsgTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// dedupWindow checks a DedupWindow option and gives its default for zero.
func dedupWindow(w time.Duration) (time.Duration, error) {
	if w < 0 {
		return 0, fmt.Errorf("%w: DedupWindow %v is negative", ErrInvalidOptions, w)
	}
	if w == 0 {
		return DefaultDedupWindow, nil
	}
	return w, nil
}
