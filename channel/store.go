package channel

import (
	"context"
	"iter"

	"github.com/spillq/spillq/diskqueue"
)

// Log is an append-only store of records numbered by sequence number (seq),
// in the words of [diskqueue.Log], which is one without an adapter. A
// channel appends the messages that do not fit its memory buffer to its
// backend's Log; a [Fanout] appends a topic's messages to its Log; the timer
// store and the delivery journal are Logs too.
//
// A method an implementation cannot carry returns an error wrapping
// [errors.ErrUnsupported]; [New] and [NewFanout] refuse, with
// [ErrInvalidOptions], the options that would need it. A Log that does not
// number its records (the go-diskqueue adapter) returns it from PutSeq and
// from ReadAt for every seq: New learns it with one ReadAt(NextSeq()),
// which on any Log finds nothing and changes nothing, and then refuses a key
// policy that names records, a timer store and a delivery journal over it.
type Log interface {
	// Put appends body; it must not keep body after it returns. It may
	// block, honouring ctx. An error means body was not stored, unless it
	// wraps [ErrNotDurable]: stored (it will be read), but not yet durable
	// when Put stopped waiting.
	Put(ctx context.Context, body []byte) error
	// PutSeq is Put returning the record's seq, valid when it stored the
	// record (no error, or one wrapping ErrNotDurable).
	PutSeq(ctx context.Context, body []byte) (uint64, error)
	// PutBatch appends a prefix of bodies, in order, and returns its
	// length; the error says why it stopped, as Put's.
	PutBatch(ctx context.Context, bodies [][]byte) (int, error)
	// NextSeq is the seq the next record appended gets.
	NextSeq() uint64
	// Floor is the oldest record some reader has not acknowledged: every
	// record below it is acknowledged by every cursor.
	Floor() uint64
	// Acknowledged reports whether every cursor has acknowledged seq.
	Acknowledged(seq uint64) bool
	// ReadAt returns record seq, retained or not yet acknowledged.
	ReadAt(seq uint64) (diskqueue.Record, error)
	// Scan yields the retained records with from <= seq < to, in order.
	Scan(from, to uint64) iter.Seq2[diskqueue.Record, error]
	// Sync makes every record appended so far durable.
	Sync(ctx context.Context) error
	// MaxRecordBytes and MinRecordBytes bound the records Put accepts.
	MaxRecordBytes() int
	MinRecordBytes() int
}

// Cursor is one reader's position in a [Log], in the words of
// [diskqueue.Cursor], which is one without an adapter: records handed out in
// order, each kept until acknowledged, read again after a restart if it was
// not.
type Cursor interface {
	// ReadBatch waits for the next record (until ctx ends or the log
	// closes), stores it and those ready after it in dst, up to len(dst),
	// and returns how many it stored.
	ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error)
	// Ack acknowledges a record ReadBatch returned. Acks come in any order.
	Ack(seq uint64) error
	// Acknowledged reports whether this cursor has acknowledged seq.
	Acknowledged(seq uint64) bool
	// Floor is this cursor's oldest record not acknowledged.
	Floor() uint64
	// Depth is how many records this cursor has not acknowledged.
	Depth() int64
	// Passed is how many records ReadBatch passed over since the log
	// opened without handing them out (damaged, or compacted away
	// before they were read).
	Passed() int64
	// Empty acknowledges every record this cursor has not.
	Empty() error
	// Unread gives back records read and not acknowledged, for the next
	// ReadBatch to hand out first, in seq order.
	Unread(recs []diskqueue.Record) error
	// Discarded reports whether seq, read and not acknowledged by the
	// reader, was acknowledged since by Empty or a drop policy.
	Discarded(seq uint64) bool
	// Unacknowledged yields the records with from <= seq < to this cursor
	// has not acknowledged, in order.
	Unacknowledged(from, to uint64) iter.Seq2[diskqueue.Record, error]
}

// Store is a Log and a Cursor reading it: a channel's backend, its timer
// store or its delivery journal.
type Store struct {
	Log    Log
	Cursor Cursor
	// Close, when set, is called once at the channel's Close, after its
	// last write to the store, to release it.
	Close func() error
}

// The disk log and its cursors are the seam's own implementation.
var (
	_ Log    = (*diskqueue.Log)(nil)
	_ Cursor = (*diskqueue.Cursor)(nil)
)
