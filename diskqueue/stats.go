package diskqueue

import (
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/internal/histogram"
)

// Stats is a snapshot of a queue's cursors, sizes and counters.
type Stats struct {
	// Depth is the records not yet acknowledged: WriteSeq - ReadSeq, less
	// those above ReadSeq acknowledged out of order.
	Depth int64
	// InFlight is the records handed out by Read and not yet acknowledged.
	InFlight int64

	// FirstSeq is the oldest record still on disk (retained for replay or
	// not yet consumed); ReadAt of anything older returns ErrNotFound, as
	// it does for a segment deleted because every record in it was
	// acknowledged while an older one still held records.
	FirstSeq uint64
	// ReadSeq is the read cursor: the oldest record not yet acknowledged.
	ReadSeq uint64
	// WriteSeq is the write cursor: the seq the next Put gets.
	WriteSeq uint64
	// ReadPos and WritePos are the cursors as segment and byte offset.
	// ReadPos.Offset is -1 when Stats would need an index read to know it
	// (records below the read position are in flight, or were acknowledged
	// out of order); [Log.Position] finds it.
	ReadPos, WritePos Position

	Segments  int   // segments on disk (those deleted as acknowledged ahead of an older one are not counted)
	DiskBytes int64 // bytes the log, index, time-index and acknowledgement files hold (not the preallocation ahead of the active segment's records; a sealed segment not read since Open has its time index estimated, within a few entries; the active segment's newest records, under 4 KiB of log and their index entries, are counted at the next time-index entry or writer round, the disk budget counts them at once)

	Puts  int64 // records accepted by Put since Open
	Acks  int64 // records acknowledged since Open
	Syncs int64 // fsyncs of the log since Open

	// CorruptRecords counts records skipped because their bytes failed a
	// check; BadFiles counts the .bad files made for them since Open.
	CorruptRecords int64
	BadFiles       int64
	// IndexRebuilds counts index and time-index files rebuilt from their log.
	IndexRebuilds int64
	// ReadErrors counts I/O errors returned by reads (not corruption).
	ReadErrors int64
	// RetriedWrites counts Puts that found the disk full, waited
	// (BlockWhenFull) and then went through.
	RetriedWrites int64
	// DroppedRecords counts the records cursors set to drop when full
	// ([Cursor.SetDropWhenFull]) gave up unacknowledged at MaxDiskBytes
	// since Open, summed over those cursors; [CursorStats].Dropped has each
	// one's.
	DroppedRecords int64
	// CompactedRecords counts the records [Log.Compact] removed since
	// Open; CompactedBytes the log bytes it freed doing so.
	CompactedRecords int64
	CompactedBytes   int64
	// MaxDiskBytes is Options.MaxDiskBytes, the budget DiskBytes is held
	// to (0: none).
	MaxDiskBytes int64
	// WriteErr is the sticky write or fsync error that stopped the log
	// taking writes (see the package doc); nil while it takes them.
	// Closed says Close was called.
	WriteErr error
	Closed   bool
	// WritePath is how Put reaches the kernel, chosen at Open: "mmap"
	// (records copied into preallocated, mapped segment files: no system
	// call per Put) or "write" (the producer's own write(2), where the OS
	// or file system cannot preallocate and map).
	WritePath string
	// SyncP50 and SyncP99 are fsync latencies of the log (the upper bound
	// of the histogram bucket holding each percentile, within 19%).
	SyncP50, SyncP99 time.Duration
}

// SyncLatencyBuckets returns the fsync latency histogram behind Stats'
// SyncP50 and SyncP99: the exclusive upper bound of each non-empty bucket
// and its count, bounds increasing.
func (l *Log) SyncLatencyBuckets() (upper []time.Duration, counts []uint64) {
	return l.syncLatency.Snapshot()
}

// Position is a place in the log: the segment (named by its base seq) and a
// byte offset in it.
type Position struct {
	Segment uint64
	Offset  int64
}

// Stats returns a snapshot of the log's state. It takes no lock on the
// write path and does no I/O. Its cursor fields (Depth, InFlight, ReadSeq, ReadPos, Acks)
// are those of the cursor furthest behind, the one retention waits on (for
// a Queue: its cursor); with no cursor, ReadSeq is WriteSeq. Each cursor's
// own figures are in [Cursor.Stats].
func (l *Log) Stats() Stats { return l.stats(l.slowestCursor()) }

// slowestCursor is the cursor furthest behind (nil: none).
func (l *Log) slowestCursor() *Cursor {
	var slowest *Cursor
	for _, c := range *l.cursorList.Load() {
		if slowest == nil || c.ackFloor.Load() < slowest.ackFloor.Load() {
			slowest = c
		}
	}
	return slowest
}

// stats is Stats with the cursor fields of c (none if nil).
func (l *Log) stats(c *Cursor) Stats {
	st := Stats{
		WriteSeq:     l.nextSeq.Load(),
		DiskBytes:    l.diskBytes.Load(),
		Puts:         int64(l.nextSeq.Load() - l.openSeq),
		MaxDiskBytes: l.opts.MaxDiskBytes,
		Closed:       l.isClosed.Load(),
	}
	l.counters.fill(&st)
	if err := l.failErr.Load(); err != nil {
		st.WriteErr = *err
	}
	st.ReadSeq = st.WriteSeq
	if c != nil {
		cs := c.Stats()
		st.ReadSeq, st.Depth, st.InFlight, st.Acks = cs.ReadSeq, cs.Depth, cs.InFlight, cs.Acks
	}
	st.WritePath = "write"
	if l.mapped {
		st.WritePath = "mmap"
	}
	// Segments deleted as acknowledged behind an older one are not on disk.
	sum := l.summary()
	st.Segments, st.FirstSeq, st.WritePos = sum.onDisk, sum.firstSeq, sum.writePos
	st.ReadPos = st.WritePos
	if c != nil {
		st.ReadPos = c.floorPosition(st.WritePos)
	}
	return st
}

// Position returns where the record seq starts: its segment and byte
// offset, with one read of the sequence index. seq may be the next to be
// put (WriteSeq). It returns [ErrNotFound] for a seq not in the log.
func (l *Log) Position(seq uint64) (Position, error) {
	if l.isClosed.Load() {
		return Position{}, ErrClosed
	}
	return l.position(seq)
}

// counters are the log's counts of events since Open, for Stats: atomics,
// added to wherever the event happens, without a lock.
type counters struct {
	syncs            atomic.Int64
	corruptRecords   atomic.Int64
	badFiles         atomic.Int64
	indexRebuilds    atomic.Int64
	readErrors       atomic.Int64
	retriedWrites    atomic.Int64
	droppedRecords   atomic.Int64        // given up by drop-when-full cursors (discard.go)
	compactedRecords atomic.Int64        // removed by Compact (compact.go)
	compactedBytes   atomic.Int64        // log bytes Compact freed
	sparesUsed       atomic.Int64        // rotations that renamed a spare into place
	syncLatency      histogram.Histogram // duration of each fsync of the log
}

// fill copies the counts into st.
func (c *counters) fill(st *Stats) {
	st.Syncs = c.syncs.Load()
	st.CorruptRecords = c.corruptRecords.Load()
	st.BadFiles = c.badFiles.Load()
	st.IndexRebuilds = c.indexRebuilds.Load()
	st.ReadErrors = c.readErrors.Load()
	st.RetriedWrites = c.retriedWrites.Load()
	st.DroppedRecords = c.droppedRecords.Load()
	st.CompactedRecords = c.compactedRecords.Load()
	st.CompactedBytes = c.compactedBytes.Load()
	p := c.syncLatency.Percentiles(0.5, 0.99)
	st.SyncP50, st.SyncP99 = p[0], p[1]
}

// SegmentInfo describes one segment of a log, for choosing what to
// compact.
type SegmentInfo struct {
	Base, End uint64 // its seqs: [Base, End)
	// Bytes is what its files hold on disk: the log, the two indexes and
	// each cursor's acknowledgement bitmap (for the segment being written,
	// its sequence index as of the last time-index entry).
	Bytes int64
	// Sealed says appends have moved on and the segment's files are cut
	// to size and fsynced: [Log.Compact] takes it.
	Sealed bool
}

// Segments returns the log's segments, oldest first, from memory (no I/O).
// Segments deleted as acknowledged while an older one still held records
// are left out.
func (l *Log) Segments() []SegmentInfo {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	out := make([]SegmentInfo, 0, len(l.segs))
	for _, s := range l.segs {
		if s.gone.Load() {
			continue
		}
		out = append(out, SegmentInfo{Base: s.base, End: s.endNow(), Bytes: s.diskBytes(), Sealed: s.sealed.Load() && !s.writing.Load()})
	}
	return out
}
