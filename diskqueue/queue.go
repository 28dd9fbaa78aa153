package diskqueue

import (
	"context"
	"fmt"
	"iter"
)

// Queue is a durable FIFO of records on disk: a [Log] with one [Cursor]
// of its own. It is safe for concurrent use by any number of producers and
// consumers.
//
// Producers call [Log.Put]; consumers call [Queue.Read] and then
// [Queue.Ack]. Any stored record can be looked up with [Log.ReadAt], read
// in ranges with [Log.Scan], or found by time with [Log.SeekTime]. More
// cursors over the same log come from [Log.Cursor]; a segment is deleted
// once all of them, the Queue's own included, have acknowledged it.
type Queue struct {
	*Log
	c *Cursor
}

// Open opens the queue in dir, creating the directory if needed, and
// recovers from whatever state a crash left it in (see FORMAT.md). Only one
// Queue may have a directory open at a time; a second Open returns
// [ErrLocked]. A directory whose cursor file is missing or damaged has
// every record on disk that its acknowledgement files do not mark
// acknowledged delivered again, unless it has named cursors: that
// is a [Log]'s directory ([OpenLog]), refused with [ErrInvalidOptions].
func Open(dir string, opts Options) (*Queue, error) {
	return withOwnCursor(OpenLog(dir, opts))
}

// withOwnCursor makes a Queue of a log just opened: its own cursor, made
// at the oldest record when the directory has none. A directory with named
// cursors and none of its own is a Log's (OpenLog's, or a topic's): a
// cursor of its own made there would hold every segment from the oldest
// on, read by nobody, so Open refuses it. A read-only view's cursor is
// never stored and may go anywhere.
func withOwnCursor(l *Log, err error) (*Queue, error) {
	if err != nil {
		return nil, err
	}
	if names := l.Cursors(); !l.readOnly && len(names) > 0 && names[0] != "" {
		l.Close()
		return nil, fmt.Errorf("%w: %s is a log with named cursors %q and no cursor of a queue's own; open it with OpenLog", ErrInvalidOptions, l.dir, names)
	}
	c, err := l.cursor("", FromOldest())
	if err != nil {
		l.Close()
		return nil, err
	}
	return &Queue{Log: l, c: c}, nil
}

// OpenReadOnly opens the queue in dir for inspection, such as by an
// operator's tool while a service has it open: it takes no lock, starts no
// writer, and changes no file. It sees the records written up to the
// moment it opens, up to the first bytes at the tail that do not check out
// (a write in progress, or a torn one that Open would cut). Put, Sync and
// Empty return [ErrReadOnly]; Read and Ack work on an in-memory cursor that
// is never stored.
func OpenReadOnly(dir string, opts Options) (*Queue, error) {
	return withOwnCursor(openLogReadOnly(dir, opts))
}

// Read returns the next record in order; see [Cursor.Read].
func (q *Queue) Read(ctx context.Context) (Record, error) { return q.c.Read(ctx) }

// ReadBatch reads up to len(dst) records at once; see [Cursor.ReadBatch].
func (q *Queue) ReadBatch(ctx context.Context, dst []Record) (int, error) {
	return q.c.ReadBatch(ctx, dst)
}

// Ack acknowledges a record returned by Read; see [Cursor.Ack].
func (q *Queue) Ack(seq uint64) error { return q.c.Ack(seq) }

// Depth returns the number of records put and not yet acknowledged,
// including those handed out by Read and still in flight.
func (q *Queue) Depth() int64 { return q.c.Depth() }

// Passed is [Cursor.Passed] of the queue's cursor: the records Read passed
// over (damaged, or removed by compaction) without handing them out.
func (q *Queue) Passed() int64 { return q.c.Passed() }

// Unacknowledged is [Log.Scan] of the records with from <= seq < to not
// yet acknowledged; see [Cursor.Unacknowledged].
func (q *Queue) Unacknowledged(from, to uint64) iter.Seq2[Record, error] {
	return q.c.Unacknowledged(from, to)
}

// Stats returns a snapshot of the queue's state: the log's, with its own
// cursor's position and counts. It takes no lock on the write path.
func (q *Queue) Stats() Stats { return q.stats(q.c) }
