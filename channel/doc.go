// Package channel is spillq's delivery layer: an NSQ-style channel with a
// bounded memory buffer that spills to a Backend (Options.Backend: a
// [Store], a [Log] and a [Cursor] over it, such as spillq's disk queue, or
// github.com/nsqio/go-diskqueue through package
// [github.com/spillq/spillq/diskqueue/godq]).
//
// # The seam
//
// The channel works over two interfaces in the disk log's own words, which
// [diskqueue.Log] and [diskqueue.Cursor] satisfy without an adapter: a
// [Log] (append, append and learn the seq, read at, scan, sync, record
// limits) and a [Cursor] (read a batch, acknowledge, floor, depth, empty,
// give back what was read, tell what was discarded). The Backend, the
// timer store (Options.Timers) and the delivery journal (Options.Deliveries)
// are each a Store; a topic's channel ([Fanout.Join]) is a Cursor on the
// topic's Log. A capability a store lacks is a method returning an error
// wrapping [errors.ErrUnsupported], never a type to probe: [New] and
// [NewFanout] refuse, with [ErrInvalidOptions], the options that need one.
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
// waits until its due time. With a timer store (Options.Timers; every
// queue from spillq.Open has one) it waits there: written with its due time
// and attempts, after which the record it came from is acknowledged, once
// the store's Sync has made the new one durable (a crash between the
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
//
// # Locks
//
// What each lock guards:
//
//   - producerCounters.putMu (c.prod.putMu), a RWMutex: held shared by
//     every Put, PutBack and (with a timer store and a delay) Requeue while
//     it hands a message over; exclusively by Close (first as an empty
//     barrier, then while it stores what it holds), Empty and KeyState, so
//     each sees no Put halfway.
//   - the 16 flightList shards' mu (flight.go): each its in-flight list and
//     the state, deadline and links of the messages in it.
//   - Channel.mu: the ready list (readyList, ready.go), the deferred heap,
//     collected, the timerSet (timerset.go), the heldGate's opening, and
//     the state of every message that is ready or deferred.
//   - timerSet.putMu, a RWMutex: held shared from a Put to the timer store
//     until its entry is in the set (putTimer); exclusively by a refill's
//     merge.
//   - moveQueue.mu (c.moves.mu, settle.go): the moves waiting for the
//     clock to settle them.
//   - pauseGate.mu (c.pause.mu, pause.go): the pause state and its chans.
//   - keyTable.mu (keys.go): the key policy's state, a channel's or a
//     topic's.
//   - Channel.passMu: passesSeen and its taking off diskPending.
//   - backendReader.mu (c.reader.mu, pump.go): reading the backend (the
//     Cursor's reads, their decoding and dispatch, the journal backlog,
//     passesLooked) and filling the read-ahead, by the pump or by a
//     receiver (readDirect), one at a time. Receivers only TryLock it.
//   - journal.mu: the delivery journal's entries for the timer store.
//   - seqStore.mu (seqstore.go): a store's acknowledgements and Empty,
//     which move its Cursor.
//   - Fanout.putMu, a RWMutex: as producerCounters.putMu, for the topic's
//     Puts (shared) against its Close and KeyState (exclusive).
//   - Fanout.memMu: the members and the memory path that sends to them.
//
// The order in which they nest, outermost first; a lock is only ever taken
// while holding locks above it in its own line, never below:
//
//   - c.prod.putMu, then the flight shards in ascending index, then
//     Channel.mu, then keyTable.mu or c.moves.mu. Requeue takes putMu
//     (shared, on its way to the timer store) before its shard, and holds
//     the shard while the message goes to the ready list or the deferred
//     heap under Channel.mu (requeueLanded; expireInFlight likewise), so
//     that Close and Empty, which take every shard and then Channel.mu,
//     never see a message between the two. Close and Empty take keyTable.mu
//     under Channel.mu (parked, empty), Empty c.moves.mu (takeMoves).
//   - c.prod.putMu, then timerSet.putMu, then Channel.mu: putTimer, from
//     Put, PutBack and Requeue (holding putMu shared) or the pump (holding
//     nothing); a refill takes timerSet.putMu and then Channel.mu to merge.
//   - Fanout.putMu, then Fanout.memMu, then (Join making the channel)
//     Channel.mu. A channel's Close takes memMu (leave) holding nothing.
//   - c.reader.mu, then what a read's dispatch takes: timerSet.putMu,
//     Channel.mu (the deferred heap), c.passMu, journal.mu and the
//     stores' locks. It is taken holding nothing: by the pump, which
//     holds it while its read waits for records (ended by closeCtx), and
//     by receivers in take, with TryLock, so no one waits for it but the
//     pump.
//   - keyTable.mu is a leaf but for a topic's table, which asks the log
//     whether a record is acknowledged under it (the log's locks, see
//     package diskqueue). c.passMu, journal.mu, seqStore.mu (a store's
//     Cursor under it), c.moves.mu and c.pause.mu are leaves: nothing of
//     the channel's is taken under them.
//
// Several paths take two of these one after the other, not nested (keyDone:
// keyTable.mu, let go, then Channel.mu; Stats: each shard, then
// Channel.mu); they add nothing to the order. A Backend's, a timer store's
// or the log's locks are taken under putMu (Puts), under a flight shard
// (Release's delivery journal write), under keyTable.mu (a topic's) and
// under Fanout.memMu (NextSeq), never the other way round: no store calls
// back into the channel while it holds its own locks. spillq's key state
// keeper does call Channel.KeyState (putMu, exclusively) from the backend's
// Close, which is why Close lets go of putMu before it closes the stores.
//
// Nothing blocks under a lock on a goroutine that needs it: the
// DeadLetter handler, which may Put, runs holding none (requeue leaves the
// timer store path, and putMu, to a message with attempts left); a Put
// holding putMu shared that waits (for room in memory, a full backend)
// ends with closeCh or closeCtx, which Close ends before it takes putMu.
//
// # Goroutines
//
// Every goroutine a Channel starts is counted in Channel.wg, which Close
// waits for after closing closeCh and cancelling closeCtx:
//
//   - pump (pump.go): started by New over a Cursor. Reads records into the
//     read-ahead for receivers that wait (a receiver that finds nothing
//     reads the backend itself first, readDirect), moving deferred ones to
//     the timer store or the deferred heap (dispatch): from New on while
//     its reads find the Cursor caught up or leave nothing for consumers
//     and the read-ahead has room, then again when a waiting receiver
//     asks (readAhead.want). Ends when closeCh closes while it waits to be
//     asked, or when a read fails after Close (closeCtx). It hands over
//     every batch it reads whole (a reader reads only with room for a
//     batch), so Close finds what was read and not taken in the
//     read-ahead alone.
//   - clock (clock.go): started by New. Each of its duties is a due time
//     in one select: it times out messages in flight (a ticker), releases
//     deferred ones when due, and, with a timer store, settles the moves
//     to it (settle.go: moveSettleWait after the first waiting, one Sync of
//     the timer store, then the old records acknowledged); it starts timer
//     store refills. Ends with closeCh; the moves it had not settled Close
//     settles, once the goroutines that queue moves are done. A duty that
//     takes long delays the others (a DeadLetter handler run for a
//     timed-out message, the Sync of a settling): the timeouts and
//     releases come later then, and a settling's acknowledgements, never
//     earlier than the Sync that makes them safe.
//   - refillTimers (refill.go): started by startRefillLocked, one at a
//     time (timerSet.refilling), at New and from the clock goroutine, so
//     that its wg.Add never races Close's Wait from zero (the clock's own
//     count is still held). Reads the timer store through for the earliest
//     entries. Kept off the clock: the read is of every deferred record
//     (O(deferred), long for a store with many), during which the clock
//     must go on timing out, releasing and settling. Ends when read and
//     merged, or at Close (isClosed during the read, closeCh while it
//     waits to read again after an error).
//   - forward (receive.go): started by the first call of Messages. Feeds
//     its Go channel, touching the message it holds until it is taken.
//     Ends when Receive fails (Close) or closeCh closes; closes the Go
//     channel.
//
// Close also waits for callers' goroutines where the messages they handle
// are in no list it collects: Puts and PutBacks (putMu), Requeues on their
// way to the timer store (putMu) and receivers between take and deliver
// (enterTake, waitTakers). A Fanout and a key table start no goroutine;
// bound (put.go) leaves a context.AfterFunc to the runtime, stopped when
// the call it bounds returns.
package channel

// The source, by concept (each file's tests in its _test.go):
//
//   - channel.go: the Channel, New, Empty, KeyState, Replay.
//   - store.go, seqstore.go: the seam (Log, Cursor, Store) and a store
//     read by seq (the timer store, the delivery journal).
//   - put.go, putback.go: Put and the spill rule; PutBack.
//   - pump.go: reading the backend back into the read-ahead.
//   - receive.go: Receive, take and deliver, ReceiveBatch, Messages;
//     ready.go: the ready list and its bell.
//   - flight.go: the in-flight lists; answer.go: Finish, Requeue, Release,
//     Fail, Touch, dead letters, and acknowledging a message's record.
//   - clock.go: the clock goroutine (timeouts, due times, settling).
//   - timers.go: deferral to the timer store and release from it;
//     timerset.go: the timer set (which deferred messages are in memory);
//     refill.go: reading the timer store through for the earliest;
//     settle.go: moves to the timer store and their settling; held.go: a
//     topic's channel's held messages first; deferred.go: deferred records
//     in the backend, counted.
//   - pause.go, stats.go, close.go: Pause, Stats and Depth, Close's phases.
//   - keys.go, keyindex.go, keystate.go: key policies; fanout.go: a topic's
//     channels; journal.go: the delivery journal; message.go: messages and
//     their envelope.
