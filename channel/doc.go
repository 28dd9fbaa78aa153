// Package channel is spillq's delivery layer: an NSQ-style channel with a
// bounded memory buffer that spills to a [Backend] (spillq's disk queue, or
// github.com/nsqio/go-diskqueue through package
// [github.com/spillq/spillq/diskqueue/godq]).
//
// # Tiers
//
// [Channel.Put] sends a message to the memory buffer (a Go chan of
// Options.MemQueueSize) while it has room and nothing is waiting in the
// backend; otherwise to the backend. With MemQueueSize 0 every message goes
// through the backend.
//
// # Ordering
//
// Once anything is in the backend, new messages go there too until it
// drains, so consumers see messages in the order they were put (nsqd does
// not promise this). The exceptions: requeued and timed-out messages are
// delivered ahead of the rest; deferred messages wait for their due time;
// and after a graceful restart, messages that were in memory at Close come
// after those already in the backend, but on a topic's channel (see
// [Fanout.Join]), where they come first.
//
// # Delivery
//
// At least once, with acknowledgement, as in nsqd: a consumer takes a
// message ([Channel.Receive], [Channel.ReceiveBatch], [Channel.TryReceive]
// or [Channel.Messages]), then answers it: [Message.Finish] (done),
// [Message.Requeue] or [Message.Retry] (failed this time: again, optionally
// after a delay), [Message.Fail] (never: dead-letter it now),
// [Message.Release] (not done, and not tried: again at once, the attempt
// not spent), or [Message.Touch] to extend its timeout. A message not
// finished within Options.MsgTimeout is delivered again with Attempts one
// higher; after Options.MaxAttempts deliveries it goes to
// Options.DeadLetter. A record read from the backend is acknowledged there
// only when its message is finished (or taken by the dead-letter handler),
// so a crash delivers it again. Close gives back what is in flight as
// Release does. A crash keeps the count only with a delivery journal
// (Options.Deliveries; spillq.Open makes one with MaxAttempts): each
// delivery of a message that has a record is written there before the
// message goes out, so a message whose handler kills the process is
// dead-lettered after MaxAttempts crashes, not delivered for ever.
//
// # Deferral
//
// A message put with a delay ([PutOptions].Delay) or requeued with one
// waits until its due time. With a [TimerStore] (Options.Timers; every
// queue from spillq.Open has one) it waits there: written with its due time
// and attempts, after which the record it came from is acknowledged, once
// the store has made the new one durable if it can (a crash between the
// two delivers it twice, never loses it), so a deferred message holds
// nothing in the Backend; but for a keyed one whose record names it to a
// key policy (KeyUnique, KeyReplace, and under KeySerial one requeued with
// a delay, up to Options.MaxDeferredInMemory of those: see [KeySerial]),
// which waits whole in memory, its record kept. The channel keeps the due times of
// at most Options.MaxDeferredInMemory of them in memory, the earliest, and
// reads the store through for the rest when those are used up, and once at
// New: a restart costs a read of what is deferred, not of the backlog.
// Without a timer store a deferred message waits whole in memory (and, if
// it came from the Backend, keeps its record there until it is finished),
// with no bound.
//
// # Durability and shutdown
//
// [Channel.Close] writes every message held in memory (buffered, requeued,
// deferred with its due time, in flight) to the backend (deferred ones to
// the timer store, if there is one), so a graceful restart loses nothing. A crash loses what was only in memory: with
// MemQueueSize 0 nothing is only in memory, and the backend's sync policy
// alone decides what survives a power cut.
//
// # Concurrency
//
// A Channel and its Messages are safe for concurrent use. No goroutine
// outlives Close.
package channel
