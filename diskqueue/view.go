package diskqueue

import (
	"iter"
	"time"
)

// View is a read-only view of a log: its lookups and its state, nothing
// that writes, consumes or closes it. The owner of a log hands out a View
// to code that watches it (an operator's tool, metrics, a replay that
// looks seqs up by time) without being able to Put to it, Read or Ack
// from its cursors, or Close it under its owner: spillq's Queue.Disk and
// Topic.Log are Views. Its methods are the log's, safe for concurrent use,
// and after the log closes return what the log's do. (To look at a log
// another process owns, open it with [OpenReadOnly].)
type View struct {
	l *Log
	// q is the Queue the view is of, whose own cursor Stats and Depth
	// report; nil for a Log's.
	q *Queue
}

// View returns a read-only view of l. Its Stats are l's (the cursor
// fields those of the cursor furthest behind).
func (l *Log) View() *View { return &View{l: l} }

// View returns a read-only view of q's log. Its Stats and Depth are q's:
// its own cursor's.
func (q *Queue) View() *View { return &View{l: q.Log, q: q} }

// Stats returns a snapshot of the log's state; see [Queue.Stats] and
// [Log.Stats].
func (v *View) Stats() Stats {
	if v.q != nil {
		return v.q.Stats()
	}
	return v.l.Stats()
}

// Depth is the number of records put and not yet acknowledged, those in
// flight included: by the Queue's own cursor, or for a Log's view by the
// cursor furthest behind.
func (v *View) Depth() int64 {
	if v.q != nil {
		return v.q.Depth()
	}
	// Not through Stats, which also walks the segments and locates the
	// read position.
	if c := v.l.slowestCursor(); c != nil {
		return c.Depth()
	}
	return 0
}

// ReadAt returns the record seq without moving any cursor; see
// [Log.ReadAt].
func (v *View) ReadAt(seq uint64) (Record, error) { return v.l.ReadAt(seq) }

// Scan iterates over the records with from <= seq < to without moving any
// cursor; see [Log.Scan].
func (v *View) Scan(from, to uint64) iter.Seq2[Record, error] { return v.l.Scan(from, to) }

// SeekTime returns the seq of the first record stored at or after t; see
// [Log.SeekTime].
func (v *View) SeekTime(t time.Time) (uint64, error) { return v.l.SeekTime(t) }

// Position returns the segment and offset where record seq starts; see
// [Log.Position].
func (v *View) Position(seq uint64) (Position, error) { return v.l.Position(seq) }

// Segments returns the log's segments, oldest first; see [Log.Segments].
func (v *View) Segments() []SegmentInfo { return v.l.Segments() }

// CursorStats returns a snapshot of every cursor of the log (a topic's:
// one per channel); see [Log.CursorStats].
func (v *View) CursorStats() []CursorStats { return v.l.CursorStats() }

// NextSeq returns the seq the next record put will get; see [Log.NextSeq].
func (v *View) NextSeq() uint64 { return v.l.NextSeq() }

// Floor is the oldest record some cursor has not acknowledged; see
// [Log.Floor].
func (v *View) Floor() uint64 { return v.l.Floor() }

// SyncLatencyBuckets returns the log's fsync latency histogram; see
// [Log.SyncLatencyBuckets].
func (v *View) SyncLatencyBuckets() (upper []time.Duration, counts []uint64) {
	return v.l.SyncLatencyBuckets()
}

// SyncLatencySumSeconds returns the sum of the fsync latencies in
// SyncLatencyBuckets; see [Log.SyncLatencySumSeconds].
func (v *View) SyncLatencySumSeconds() float64 { return v.l.SyncLatencySumSeconds() }
