package channel

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillq/spillq/internal/closed"
	"github.com/spillq/spillq/internal/notdurable"
)

// Errors returned by [Channel] and [Message] methods.
var (
	// ErrClosed is returned by every method called after [Channel.Close],
	// and by calls that were blocked when Close ran. A [Cursor] whose
	// ReadBatch returns it (wrapped or not) is taken to be closed: the
	// channel stops reading it. It is the same value as
	// diskqueue.ErrClosed, nsqbridge.ErrClosed and spillq.ErrClosed, so
	// errors.Is matches it by any of those names, whichever layer
	// returned it.
	ErrClosed = closed.Err

	// ErrFull is returned by [Channel.Put] when the memory buffer is full,
	// there is no backend to spill to, and Options.FailWhenFull is set.
	ErrFull = errors.New("channel: memory buffer full and no backend")

	// ErrTooLarge is returned by [Channel.Put] and [Channel.PutWith] for a
	// body the backend could not store: larger than its record limit (see
	// [MaxEnvelopeOverhead]) less the envelope; and for a key longer than
	// [MaxKeyBytes]. The error says which. It is refused at once, even
	// when the message would fit in the memory buffer, because Close must
	// be able to write every message it holds to the backend.
	ErrTooLarge = errors.New("channel: message too large")

	// ErrTooSmall is returned by [Channel.Put] and [Channel.PutWith] for a
	// body shorter than the backend's smallest record less the envelope
	// header (the Backend's [Log] MinRecordBytes).
	ErrTooSmall = errors.New("channel: message body too small for the backend")

	// ErrNotInFlight is returned by [Message.Finish], [Message.Requeue] and
	// [Message.Touch] for a message that is not in flight: already
	// finished or requeued, timed out and handed to another consumer, or
	// discarded by [Channel.Empty].
	ErrNotInFlight = errors.New("channel: message is not in flight")

	// ErrNoMessage is returned by [Channel.TryReceive] when no message is
	// ready.
	ErrNoMessage = errors.New("channel: no message ready")

	// ErrExpired is passed to the dead-letter handler for a message whose
	// Expires time passed before it was delivered.
	ErrExpired = errors.New("channel: message expired before delivery")

	// ErrFailed is wrapped in the reason the dead-letter handler gets for
	// a message a consumer gave up on with [Message.Fail], with the
	// consumer's cause.
	ErrFailed = errors.New("channel: message failed")

	// ErrMaxAttempts is passed to the dead-letter handler for a message
	// delivered Options.MaxAttempts times without being finished; wrapped,
	// with the cause of the last attempt's failure, when [Message.Retry]
	// gave one.
	ErrMaxAttempts = errors.New("channel: message exceeded its delivery attempts")

	// ErrBadEnvelope reports a record from the backend that is not a
	// message this package wrote. The record is acknowledged and dropped,
	// logged and counted in [Stats].
	ErrBadEnvelope = errors.New("channel: record is not a channel message")

	// ErrNoReplay is returned by [Channel.Replay] when the backend keeps
	// no records for replay, and by a topic's channel, which has no
	// backend of its own: a topic replays by a channel created (or reset
	// with 'spillq channel reset') at an older seq or time, which reads
	// the topic's log from there (spillq.ChannelOptions.Start).
	ErrNoReplay = errors.New("channel: backend cannot replay")

	// ErrNotDurable is wrapped in the error of a Put whose message was
	// stored (it will be delivered) although the Put stopped waiting for
	// it to be durable: with spillq's disk log under Disk.SyncEvery 1, its
	// ctx ended while it waited for the fsync. A crash of the process
	// does not lose such a message; a power cut before the log's next
	// fsync may. A retry stores it twice, unless the message has a key
	// under a policy that decides at Put, for which the key is taken as
	// for any message stored: under KeyUnique and KeyDedup the retry is
	// refused as a duplicate (a [DuplicateError] naming the ID of the
	// message stored, the one [Channel.Enqueue] returned in its
	// [Receipt]), and under KeyReplace it supersedes. Any other error
	// from Put means the message was not stored. A [Log] says so by wrapping it in the error of a Put
	// that stored its record; it is the same value as
	// diskqueue.ErrNotDurable.
	ErrNotDurable = notdurable.Err

	// ErrTopicChannel is returned by [Channel.Put] and [Channel.PutWith]
	// on a topic's channel (see [Fanout]): its messages are those put to
	// the topic, which every channel of it receives.
	ErrTopicChannel = errors.New("channel: a topic's channel takes messages from its topic; put to the topic")

	// ErrDuplicate is returned by Put and PutWith for a message whose key
	// the channel's key policy refuses: one with a message pending under
	// KeyUnique, one put within the window under KeyDedup (see
	// Options.DuplicatesOK). The message is not stored. The error is a
	// [*DuplicateError], which errors.Is matches to ErrDuplicate and
	// errors.As gives the ID of the message that holds the key.
	ErrDuplicate = errors.New("channel: duplicate key")

	// ErrInvalidOptions is returned by [New] for an out-of-range option.
	ErrInvalidOptions = errors.New("channel: invalid options")
)

// stored reports whether the store's Put that returned err stored its
// record: it succeeded, or stopped waiting only for the fsync
// (ErrNotDurable), and the message is to be counted stored, as a Put done.
func stored(err error) bool { return err == nil || errors.Is(err, ErrNotDurable) }

// DuplicateError is the error of a Put its key policy refused as a
// duplicate: errors.Is(err, [ErrDuplicate]) is true of it, and errors.As
// gives the message that holds the key, so an idempotent producer can
// take the refusal of a retry as the first Put's success:
//
//	var dup *channel.DuplicateError
//	if errors.As(err, &dup) {
//		id = dup.ID // the message put before
//	}
type DuplicateError struct {
	// Key is the key the Put carried.
	Key []byte
	// ID is the message that holds the key: under KeyUnique the one
	// pending, under KeyDedup the one put within the window. A key
	// restored at a restart (Options.KeyState, as spillq.Open keeps it)
	// names its message's ID too; 0 only for an entry of a KeyState made
	// by hand without one.
	ID ID
	// Policy is the policy that refused the Put: KeyUnique or KeyDedup.
	Policy KeyPolicy
	// Age is, under KeyDedup, how long before the refused Put the key was
	// put.
	Age time.Duration
}

func (e *DuplicateError) Error() string {
	if e.Policy == KeyDedup {
		return fmt.Sprintf("%v: key %q was put %v ago, within the dedup window (message %d)", ErrDuplicate, e.Key, e.Age.Round(time.Millisecond), e.ID)
	}
	return fmt.Sprintf("%v: key %q has a message pending (message %d)", ErrDuplicate, e.Key, e.ID)
}

// Is makes errors.Is(err, ErrDuplicate) true of a DuplicateError.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }
