package spillq

import (
	"context"
	"time"

	"github.com/spillq/spillq/channel"
)

// A Queue and a topic's Channel each wrap a *channel.Channel and forward
// only what a program using them calls: consuming, watching, pausing,
// emptying, closing (here, shared by both) and, for a Queue, putting
// (below). The channel's wiring (Compacted, KeyState, PutBack and the
// like, which spillq calls to pair it with its log, compactor, key state
// and dead-letter store) stays out of reach: a caller of it would break
// what spillq keeps in step. TestFacadeMethods holds the line.

// Both satisfy the worker's seam, and MsgTimeout, which a Worker asks for
// to touch long jobs in time.
var (
	_ channel.Receiver                        = (*Queue)(nil)
	_ channel.Receiver                        = (*Channel)(nil)
	_ interface{ MsgTimeout() time.Duration } = (*Queue)(nil)
	_ interface{ MsgTimeout() time.Duration } = (*Channel)(nil)
)

// Channel is one named channel of a [Topic], from [Topic.Channel]: it
// delivers every message put to the topic, with its own acknowledgements,
// in-flight messages, deferrals and pause. Messages are put to the topic,
// not to a channel. Its lag and timer store are in [Topic.Stats], its
// dead letters in [Topic.DeadLetters]. Closing it leaves its place in the
// topic. It is safe for concurrent use.
type Channel struct {
	verbs
}

// verbs are the methods a Queue and a topic's Channel share.
type verbs struct {
	ch *channel.Channel
}

// Receive returns the next message, waiting until there is one, ctx ends
// or the queue or channel closes ([ErrClosed]). The message is in flight
// until Finish, Requeue or the like; if none comes within MsgTimeout it is
// delivered again. Requeued and timed-out messages come first, then the
// memory buffer, then the disk. With a ctx already done it takes nothing
// and returns ctx.Err(), backlog or not. See [channel.Channel.Receive].
func (v *verbs) Receive(ctx context.Context) (*Message, error) { return v.ch.Receive(ctx) }

// ReceiveBatch waits for one message like Receive, then takes up to max-1
// more that are ready without waiting.
func (v *verbs) ReceiveBatch(ctx context.Context, max int) ([]*Message, error) {
	return v.ch.ReceiveBatch(ctx, max)
}

// TryReceive returns a message that is ready now, without waiting: nil and
// [ErrNoMessage] when there is none (or delivery is paused).
func (v *verbs) TryReceive() (*Message, error) { return v.ch.TryReceive() }

// Messages returns a Go channel of messages, for use in select, closed
// when the queue or channel closes. Each message received from it is in
// flight, exactly as from Receive. One message at a time waits in it,
// taken (its attempt counted) and kept from timing out until received:
// use Messages or Receive, not both. See [channel.Channel.Messages].
func (v *verbs) Messages() <-chan *Message { return v.ch.Messages() }

// FinishAll finishes a batch of messages, for consumers that work in
// batches. It returns the first error; the other messages are finished
// regardless.
func (v *verbs) FinishAll(msgs []*Message) error { return v.ch.FinishAll(msgs) }

// MsgTimeout is how long a delivery may go untouched before it is
// delivered again (Options.MsgTimeout, 60 seconds by default). A [Worker]
// touches a long job's message well within it.
func (v *verbs) MsgTimeout() time.Duration { return v.ch.MsgTimeout() }

// Depth is the number of messages waiting for delivery, in memory and on
// disk. It leaves out messages in flight and deferred ones. To tell that
// a queue has drained, see Depth and Stats().InFlight both at zero twice,
// with no Finish in between (a message being received is in neither for
// an instant).
func (v *verbs) Depth() int64 { return v.ch.Depth() }

// Stats returns a snapshot of the delivery state and counters: depths,
// in flight, deferred, puts, finishes, requeues, dead letters, latency
// percentiles. See [channel.Stats].
func (v *verbs) Stats() channel.Stats { return v.ch.Stats() }

// LatencyBuckets returns the end-to-end latency histogram (Put to Finish)
// behind Stats' percentiles, for a metrics system: the exclusive upper
// bound of each non-empty bucket and its count, bounds increasing (four
// buckets per power of two). Package metrics exports it to Prometheus.
func (v *verbs) LatencyBuckets() (upper []time.Duration, counts []uint64) {
	return v.ch.LatencyBuckets()
}

// LatencySumSeconds returns the sum, in seconds, of the latencies counted
// in LatencyBuckets: a histogram's _sum.
func (v *verbs) LatencySumSeconds() float64 { return v.ch.LatencySumSeconds() }

// Pause stops delivery: Receive waits until Unpause (a message it was
// about to return goes back first in line), and Messages holds back the
// message it holds. Puts go on.
func (v *verbs) Pause() { v.ch.Pause() }

// Unpause resumes delivery.
func (v *verbs) Unpause() { v.ch.Unpause() }

// Empty discards every message: waiting in memory and on disk, deferred,
// requeued and in flight (Finish on those returns [ErrNotInFlight]). A
// topic's channel discards its own backlog only; the topic and its other
// channels keep theirs. Puts wait while Empty runs.
func (v *verbs) Empty() error { return v.ch.Empty() }

// Close stops delivery and stores every message held in memory (waiting,
// requeued, deferred with its due time, in flight with the attempts it had
// before the delivery Close cut short), then closes the files, so a
// graceful restart loses nothing and delivers again what was not
// finished. Calls blocked in Put or Receive return [ErrClosed], and so
// does a second Close. A topic's channel keeps its place in the topic,
// which holds its messages until it is opened again or deleted. See
// [channel.Channel.Close] for a store that fails or blocks.
func (v *verbs) Close() error { return v.ch.Close() }

// Put queues body for delivery. The queue takes ownership of body: do not
// change it after Put returns. An error means the message was not stored,
// unless it wraps [ErrNotDurable]: stored, and delivered, but Put stopped
// waiting for it to be durable (ctx ended during the fsync). A body out of
// Options.Disk's record limits is refused with [ErrTooLarge] or
// channel.ErrTooSmall. Put blocks, honouring ctx, only when the disk does
// (Disk.BlockWhenFull). A Put made for a request should not pass the
// request's context: see [channel.Channel.Put].
func (q *Queue) Put(ctx context.Context, body []byte) error { return q.ch.Put(ctx, body) }

// PutWith is Put with a delay, an expiry or a key ([PutOptions]); the key
// policy (Options.Keys) may refuse a keyed message with [ErrDuplicate].
func (q *Queue) PutWith(ctx context.Context, body []byte, po PutOptions) error {
	return q.ch.PutWith(ctx, body, po)
}

// Enqueue is PutWith returning a [Receipt]: the message's ID, and its
// record's seq in the disk log. The receipt is valid when the error is nil
// or wraps [ErrNotDurable]. A Put the key policy refuses returns a
// [*DuplicateError] naming the message that holds the key.
func (q *Queue) Enqueue(ctx context.Context, body []byte, po PutOptions) (Receipt, error) {
	return q.ch.Enqueue(ctx, body, po)
}

// Replay puts the records with from <= seq < to that the disk log still
// holds back into the queue as fresh messages (new IDs, no attempts), for
// reprocessing after a bug fix, and returns how many it put. Finished
// records are kept for it by Disk.RetainBytes and Disk.RetainAge; without
// retention a finished record lasts only until its segment is deleted.
// Look seqs up by time with Disk().SeekTime.
func (q *Queue) Replay(ctx context.Context, from, to uint64) (int, error) {
	return q.ch.Replay(ctx, from, to)
}
