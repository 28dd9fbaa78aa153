package diskqueue

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

	// files are the read handles shared by Read, ReadAt and Scan (pread),
	// nil until opened. A segment found sealed at Open is opened on first
	// use (Log.segFiles), so opening a queue costs no file opens per
	// sealed segment; the others get theirs when created. filesMu orders
	// that first open against closeFiles, and closed (under filesMu) says
	// the segment was deleted, so nothing opens it again.
	files   atomic.Pointer[segFiles]
	filesMu sync.Mutex
	closed  bool

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
	// end, in Unix nanoseconds; retention by age uses it.
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
	return s.sizeNow() + s.indexBytes.Load() + s.timeIndexBytes.Load() + int64(s.bitmaps.Load())*ackFileSize(s.endNow()-s.base)
}

// segFiles are a segment's read handles. index is nil when the segment has
// no sequence index to use; readers then scan the log.
type segFiles struct {
	log, index file
}

// setFiles publishes handles opened eagerly (at creation, or for the last
// segment at Open).
func (s *segment) setFiles(log, index file) {
	s.files.Store(&segFiles{log: log, index: index})
}

// closeFiles releases the read handles. A pread running concurrently keeps
// the descriptor alive until it returns (os.File counts references) and the
// next one fails with os.ErrClosed, which callers turn into ErrNotFound.
func (s *segment) closeFiles() {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	s.closed = true
	if f := s.files.Load(); f != nil {
		if f.log != nil {
			f.log.Close()
		}
		if f.index != nil {
			f.index.Close()
		}
	}
}
