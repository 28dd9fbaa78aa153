package diskqueue

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// File name suffixes. A segment is three files sharing one base name: the
// base seq as 20 zero-padded digits, so `ls` lists them in log order.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	ackSuffix       = ".ack"
	badSuffix       = ".bad"
	tmpSuffix       = ".tmp"
	cursorName      = "cursor"
	lockName        = "LOCK"
	segmentDigits   = 20
)

// segmentName returns the file name of the segment whose first record is
// base, with the given suffix.
func segmentName(base uint64, suffix string) string {
	return fmt.Sprintf("%0*d%s", segmentDigits, base, suffix)
}

// parseSegmentName is the inverse of segmentName for names ending in suffix.
func parseSegmentName(name, suffix string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, suffix)
	if !ok || len(digits) != segmentDigits {
		return 0, false
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return base, true
}

// segment is one log file with its index and time index.
//
// The fields set at creation never change. The atomics are written by the
// producer appending under the log's mu or by the writer goroutine (or by Open
// before any goroutine starts), and read by anyone holding the segment:
// they publish how much of the log is readable.
type segment struct {
	dir  string
	base uint64 // seq of the first record; also the file name

	// generations are the segment's read handles (segfiles.go): s.files,
	// s.filesMu and the rest.
	generations
	// closed (under filesMu) says the segment was deleted: nothing opens
	// its files again.
	closed bool

	// used is set by each acquireFiles and cleared by the cache's sweep
	// (a clock's reference bit), so that segments read lately keep their
	// handles. cached (under the cache's mu) says the segment is in it.
	used   atomic.Bool
	cached bool

	// extent packs the segment's size (low 32 bits: log bytes, header
	// included, written and readable) and its record count (high 32 bits:
	// the segment holds [base, end)), published by one store: a reader
	// that loads it sees a size and an end that belong together. Both grow
	// only. Options keep a segment under 4 GiB, and every record takes at
	// least 25 bytes, so both fit.
	extent atomic.Uint64
	// sealed is set once appends have moved on to the next segment; size
	// and end are final. (The files are cut to size and fsynced a moment
	// later by the writer goroutine; writing says when that is done.)
	sealed atomic.Bool
	// writing is set while the segment has write handles: it is being
	// appended to or waits to be sealed. Retention leaves it alone.
	writing atomic.Bool
	// maxTime is the newest record timestamp (running maximum) seen up to
	// end, in Unix nanoseconds; retention by age uses it. While the
	// segment is written it is not kept up to date (segMaxTime).
	maxTime atomic.Int64
	// partialIndex is set only on a read-only view's last segment, whose
	// index it may not repair: entries from indexedEnd on are not trusted.
	// The zero value means every entry is. Set before the segment is shared.
	partialIndex bool
	indexedEnd   uint64
	// indexBytes and timeIndexBytes are the sizes of the two index files,
	// for Stats and the disk budget.
	indexBytes     atomic.Int64
	timeIndexBytes atomic.Int64

	// bitmaps is how many cursors' acknowledgement files the segment has,
	// for diskBytes; changed under the log's segMu (write-locked).
	bitmaps atomic.Int32
	// gone is set when every record was acknowledged and the segment's
	// files were deleted while an older segment still held records: it
	// stays in the list, as its tombstone stays on disk, so the gap it
	// leaves is not taken for lost data. Readers skip it.
	gone atomic.Bool
	// keptFrom, when above base, is the first seq whose record's bytes
	// are still in the log: those of the records before it, every one
	// acknowledged by every cursor, were freed in place (a hole punched
	// from the first record on) to make room on a full file system
	// (recycleActiveLocked). Reads find them gone, as in a deleted
	// segment. Found again at Open (punchedPrefix).
	keptFrom atomic.Uint64

	// shrunk is how many log bytes compactions in this process removed:
	// the extent keeps the size the first generation's readers go by, and
	// diskBytes takes this off it. Changed under the log's segMu
	// (write-locked), by the writer goroutine.
	shrunk atomic.Int64
	// leftovers says a compaction of the segment failed after its marker
	// was written: the marker and the new files may still be there, and
	// deleting the segment removes them first (compactswap.go).
	leftovers atomic.Bool
}

// bounds returns the segment's size and end, consistent with each other.
func (s *segment) bounds() (size int64, end uint64) {
	v := s.extent.Load()
	return int64(uint32(v)), s.base + v>>32
}

func (s *segment) sizeNow() int64 { size, _ := s.bounds(); return size }
func (s *segment) endNow() uint64 { _, end := s.bounds(); return end }

// setExtent publishes size and end together.
func (s *segment) setExtent(size int64, end uint64) {
	s.extent.Store((end-s.base)<<32 | uint64(uint32(size)))
}

func (s *segment) path(suffix string) string {
	return filepath.Join(s.dir, segmentName(s.base, suffix))
}

// diskBytes is what the segment's files hold: the log, the two indexes and
// each cursor's acknowledgement bitmap of its records (a tombstone, for a
// segment gone). Space preallocated ahead of the records is not counted.
func (s *segment) diskBytes() int64 {
	if s.gone.Load() {
		return ackHeaderSize
	}
	return s.sizeNow() - s.shrunk.Load() + s.indexBytes.Load() + s.timeIndexBytes.Load() + int64(s.bitmaps.Load())*ackFileSize(s.endNow()-s.base)
}

// limit is how far seg's log is readable in generation f.
func (s *segment) limit(f *segFiles) int64 {
	if f.size > 0 {
		return f.size
	}
	return s.sizeNow()
}

// setFiles publishes handles opened eagerly (at creation, or for the last
// segment at Open) as the segment's first generation.
func (s *segment) setFiles(log, index file) {
	s.files.Store(newSegFiles(log, index, 0, false))
}
