package diskqueue

import (
	"cmp"
	"slices"
)

// CursorStats returns a snapshot of every cursor of the log, by name (a
// Queue's own cursor, if any, first, named ""). Like [Cursor.Stats] it
// takes no lock and does no I/O, and unlike [Log.Cursor] it never creates
// one.
func (l *Log) CursorStats() []CursorStats {
	list := *l.cursorList.Load()
	out := make([]CursorStats, len(list))
	for i, c := range list {
		out[i] = c.Stats()
	}
	slices.SortFunc(out, func(a, b CursorStats) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Acknowledged reports whether this cursor has acknowledged record seq:
// below its read position, in a segment deleted once acknowledged, or with
// its bit set (out of order, or before a restart). A seq not yet written
// is not acknowledged. It takes the cursor's lock and may open a bitmap,
// so it is for checks at startup, not for every record.
func (c *Cursor) Acknowledged(seq uint64) bool { return c.acknowledged(seq) }

// Acknowledged reports whether the queue's cursor has acknowledged record
// seq (see [Cursor.Acknowledged]).
func (q *Queue) Acknowledged(seq uint64) bool { return q.c.Acknowledged(seq) }

// NextRead is the seq the cursor's next Read starts from: every record
// below it was handed out (or passed over), none from it on was. It takes
// the cursor's read lock, so a Read in progress is over when it returns: a
// caller that has just compacted a segment knows that the records it
// removed from this seq on were never handed out, and never will be.
func (c *Cursor) NextRead() uint64 {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	return c.rd.seq
}

// NextRead is the queue's cursor's (see [Cursor.NextRead]).
func (q *Queue) NextRead() uint64 { return q.c.NextRead() }

// Acknowledged reports whether every cursor of the log has acknowledged
// record seq (see [Cursor.Acknowledged]): true for any seq written when the
// log has no cursor, false for one not yet written.
func (l *Log) Acknowledged(seq uint64) bool {
	if seq >= l.NextSeq() {
		return false
	}
	for _, c := range *l.cursorList.Load() {
		if !c.acknowledged(seq) {
			return false
		}
	}
	return true
}

// Floor is the oldest record some cursor of the log has not acknowledged
// (the lowest of their read positions): every record below it is
// acknowledged by every cursor. With no cursor it is [Log.NextSeq]. Like
// [Log.CursorStats] it takes no lock and does no I/O.
func (l *Log) Floor() uint64 {
	floor := l.NextSeq()
	for _, c := range *l.cursorList.Load() {
		floor = min(floor, c.ackFloor.Load())
	}
	return floor
}

// MaxRecordBytes and MinRecordBytes are the record limits Put enforces
// (Options, defaults applied), so callers that wrap records (a channel's
// envelope) can refuse what would not fit before they build it.
func (l *Log) MaxRecordBytes() int { return l.opts.MaxRecordBytes }
func (l *Log) MinRecordBytes() int { return l.opts.MinRecordBytes }

// floorPosition is where the floor is, as far as memory tells: the
// reader's position when everything read is acknowledged, a segment's
// start, or the write position at the end; otherwise the floor's segment
// with Offset -1.
func (c *Cursor) floorPosition(writePos Position) Position {
	floor := c.ackFloor.Load()
	c.readMu.Lock()
	rd := c.rd
	c.readMu.Unlock()
	if rd.seg != nil && rd.seq == floor && !rd.seg.gone.Load() {
		return Position{Segment: rd.seg.base, Offset: rd.off}
	}
	if floor >= c.log.nextSeq.Load() {
		return writePos
	}
	seg := c.log.segmentAt(floor)
	switch {
	case seg == nil:
		return writePos
	case seg.base == floor:
		return Position{Segment: seg.base, Offset: fileHeaderSize}
	}
	return Position{Segment: seg.base, Offset: -1}
}

// CursorStats is a snapshot of one cursor.
type CursorStats struct {
	Name string
	// Depth is the records not yet acknowledged: the log's WriteSeq -
	// ReadSeq, less those above ReadSeq acknowledged out of order (see
	// [Cursor.Depth] for records compaction removed).
	Depth int64
	// InFlight is the records handed out by Read and not yet acknowledged.
	InFlight int64
	// ReadSeq is the oldest record not yet acknowledged.
	ReadSeq uint64
	// Acks counts the records acknowledged since Open.
	Acks int64
	// Dropped counts the records given up unacknowledged since Open
	// because the cursor was set to drop when full
	// ([Cursor.SetDropWhenFull]) and the log reached MaxDiskBytes.
	Dropped int64
	// DropWhenFull says the cursor is set to drop when full: it does not
	// hold the log's space at MaxDiskBytes.
	DropWhenFull bool
}

// Stats returns a snapshot of the cursor. It takes no lock and does no I/O.
func (c *Cursor) Stats() CursorStats {
	// acks before handed: every Ack follows its Read, so the difference
	// is never below zero however the two race.
	acks := c.acks.Load()
	return CursorStats{
		Name:     c.name,
		Depth:    c.Depth(),
		InFlight: c.handed.Load() - acks,
		ReadSeq:  c.ackFloor.Load(),
		Acks:     acks,
		Dropped:  c.dropped.Load(),

		DropWhenFull: c.dropWhenFull.Load(),
	}
}

// Depth returns the number of records put and not yet acknowledged by this
// cursor, including those handed out by Read and still in flight. A record
// [Log.Compact] removed before the cursor read it counts until Read passes
// over it (Read does so without waiting, counting it acknowledged).
func (c *Cursor) Depth() int64 {
	return c.depth(c.log.nextSeq.Load)
}
