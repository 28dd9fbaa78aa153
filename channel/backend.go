package channel

import "context"

// Source is a channel's disk tier seen from the read side: records handed
// out in order, each kept until acknowledged. A [Backend] is a Source the
// channel also writes to; a topic's channel (see [Fanout]) reads a Source
// only, its cursor over the topic's log, which the topic writes.
//
// A record read but never acknowledged (the process crashed while it was
// in flight) is read again after a restart.
type Source interface {
	// Read returns the next record and its sequence number, waiting until
	// there is one, ctx ends or the source closes.
	Read(ctx context.Context) (seq uint64, body []byte, err error)
	// Ack removes a record returned by Read. Acks may come in any order.
	Ack(seq uint64) error
	// Depth is how many records are stored and not acknowledged.
	Depth() int64
	// Empty discards every record.
	Empty() error
	// Close flushes and releases the source.
	Close() error
}

// BatchSource is implemented by sources that hand out several records in
// one call, such as spillq's disk queue: the pump then takes what is
// ready in batches, with one round trip to the source (and its lock, which
// the consumers' acknowledgements take too) for each. A source that is
// also an [Unreader] is read one record at a time, so that at Close the
// pump holds at most one record it has not handed over.
type BatchSource interface {
	// ReadBatch is Read of up to len(seqs) records (bodies is as long):
	// it waits for the first as Read does, takes those ready after it
	// without waiting, and returns how many it stored.
	ReadBatch(ctx context.Context, seqs []uint64, bodies [][]byte) (int, error)
}

// Unreader is implemented by sources that outlive the channel reading
// them, such as a topic's cursor: at Close the channel gives back, in
// order, the records its pump had read ahead and not handed to a
// consumer, for the next channel over the source to read first. (Other
// sources need not: their records stay stored until acknowledged, and a
// restart reads them again.)
type Unreader interface {
	Unread(seq uint64, body []byte)
}

// Discarder is implemented by sources that can discard records the
// channel has read and not acknowledged, such as a topic's cursor (its
// Empty, and a lag policy that drops a channel's oldest backlog at the
// disk budget). Before it delivers a message read from the source (again),
// the channel asks, and drops one discarded meanwhile, so what the source
// counts as discarded is not delivered too.
type Discarder interface {
	Discarded(seq uint64) bool
}

// Backend is the disk tier a Channel spills to. spillq's disk queue
// satisfies it through spillq.Open; package
// [github.com/spillq/spillq/diskqueue/godq] adapts nsqd's go-diskqueue.
type Backend interface {
	Source
	// Put stores body; it must not keep body after it returns. It may
	// block, honouring ctx. An error means body was not stored, unless
	// it wraps [ErrNotDurable]: stored (it will be read), but not yet
	// durable when Put stopped waiting.
	Put(ctx context.Context, body []byte) error
}

// SeqBackend is a Backend that tells the seqs of the records it stores,
// such as spillq's disk queue: what a key policy's state (see
// [Channel.KeyState]) names its records by, so that it survives a
// restart.
type SeqBackend interface {
	Backend
	// PutSeq is Put returning the record's seq (valid when it stored it:
	// no error, or one wrapping [ErrNotDurable]).
	PutSeq(ctx context.Context, body []byte) (uint64, error)
	// NextSeq is the seq the next record put gets.
	NextSeq() uint64
	// Floor is the oldest record not acknowledged: every record below it
	// is.
	Floor() uint64
}

// RecordLimiter is implemented by backends that refuse records outside a
// range of sizes, such as spillq's disk queue. [New] reads the limits once,
// and Put refuses any body that would not make a record in range once in
// its envelope, with [ErrTooLarge] or [ErrTooSmall], rather than accept it
// into memory and fail to keep it at Close.
type RecordLimiter interface {
	// MaxRecordBytes is the largest record Put accepts.
	MaxRecordBytes() int
	// MinRecordBytes is the smallest record Put accepts. A Channel refuses
	// bodies shorter than this less [MinEnvelopeOverhead].
	MinRecordBytes() int
}

// BacklogScanner is implemented by backends that can list the records they
// hold without handing them out, such as spillq's disk queue. [New] reads
// the backlog once, in the background, to count the deferred messages in
// it for [Stats] (after a restart they may sit behind many others) — but
// only without Options.Timers: with a timer store, deferred messages are
// there, and a restart reads it instead, never the backlog.
type BacklogScanner interface {
	// ScanBacklog returns end, the seq Read will give the first record put
	// after the call, and an iterator over the records stored before the
	// call and not yet read, in seq order, with the seqs Read gives them.
	// The iterator runs on its own goroutine while the channel reads the
	// same records; it must not wait for new records, and it stops when
	// yield returns false (at Close).
	ScanBacklog() (end uint64, records func(yield func(seq uint64, body []byte, err error) bool))
}

// PassCounter is implemented by a Backend whose Read passes over records
// it stored but will never hand out (spillq's disk log: damaged ones, and
// those a compaction removed before they were read). Passed is how many
// since the backend opened. The channel counts each stored record in its
// backlog (Stats.DiskDepth) until it reads it, and takes these off as its
// reads pass them.
type PassCounter interface {
	Passed() int64
}

// Replayer is implemented by backends that keep acknowledged records for
// replay, such as spillq's disk queue with retention.
type Replayer interface {
	// Replay yields the stored bodies of records with from <= seq < to.
	Replay(from, to uint64) func(yield func(body []byte, err error) bool)
}
