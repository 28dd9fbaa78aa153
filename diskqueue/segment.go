package diskqueue

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
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

	// files are the read handles shared by Read, ReadAt and Scan (mapped,
	// or pread),
	// nil until opened: the segment's current generation (segFiles). A
	// segment found sealed at Open is opened on first use
	// (Log.acquireFiles), so opening a queue costs no file opens per
	// sealed segment; the others get theirs when created; a compaction
	// swaps in a new generation. A sealed segment nobody holds may give
	// its generation back (segCache) and is opened again on its next use,
	// as at Open; evicted (under filesMu) says one was given back, and
	// gaveBack (under filesMu) what it was: its size, for a compacted one
	// whose extent still says the size before, and what opening it again
	// needs without checking its files anew. filesMu orders those opens,
	// the eviction and the swap
	// against closeFiles, and against each other; closed (under filesMu)
	// says the segment was deleted, so nothing opens it again.
	// retired (under filesMu) are the generations compactions replaced,
	// which readers may still hold: closed by their last release, or with
	// the segment.
	files    atomic.Pointer[segFiles]
	filesMu  sync.Mutex
	closed   bool
	retired  []*segFiles
	evicted  bool
	gaveBack struct {
		size               int64
		compacted, indexed bool
	}
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
	// deleting the segment removes them first (compact.go).
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

// segFiles are one generation of a segment's read handles: the files the
// segment was created or found with, then those each compaction swaps in.
// index is nil when the segment has no sequence index to use; readers then
// scan the log. The fields are set before the generation is published and
// never change, except refs, closed and the mappings (made once, by maps).
//
// A reader uses one generation throughout (offsets from its index are
// offsets in its log), holding it with acquireFiles and letting go with
// release. refs counts the holders: one for the segment while the
// generation is its current one, and one per reader. The last release
// closes the files and unmaps them, so a reader that holds a generation a
// compaction has replaced finishes on it, reading the old files (unlinked,
// but open and mapped). Deleting the segment closes every generation's
// descriptors at once (closeFiles), whatever refs says: a pread running
// then keeps its descriptor alive until it returns (os.File counts
// references), and the next one fails with os.ErrClosed, which callers
// turn into ErrNotFound. The mappings stay until the last holder lets go:
// unmapping under a reader could hand it whatever the address is reused
// for. (Deletion also makes each cursor's reader let go of the segment,
// Cursor.leaveLocked, so an idle cursor does not keep a deleted segment's
// blocks allocated; a Scan paused in one keeps them until it goes on.)
type segFiles struct {
	log, index file
	// size is the log bytes this generation holds; zero for the first
	// generation, which goes by the segment's published extent (it may
	// still be growing).
	size int64
	// compacted says the log is a compacted one (format version 2): it
	// skips the seqs of records compaction removed, and their index
	// entries are marked (indexRemoved).
	compacted bool
	refs      atomic.Int64 // holders; zero once the last has let go
	// closed says the segment was deleted or the log closed: nobody takes
	// the generation again, and its descriptors are closed.
	closed atomic.Bool
	// mu orders closing the descriptors (fdsClosed) against mapping them:
	// a descriptor closed between Fd and mmap could be a number reused
	// by another open, and the mapping another file's.
	mu        sync.Mutex
	fdsClosed bool
	// logMap and indexMap are the log and index mapped shared and
	// read-only (readMapper), made on first use (maps); nil where they
	// cannot be, and readers then use pread. They are unmapped by the
	// last release.
	mapOnce          sync.Once
	logMap, indexMap []byte
	// reopened says the cache gave the segment's previous generation back
	// (evict): lookups then map this one only once they have used it
	// mapAfterLookups times (mapsForLookup). lookups counts them.
	reopened bool
	lookups  atomic.Int32
}

// mapAfterLookups is how many lookups read a reopened generation with
// pread before one maps it: mapping a file, faulting in its pages and
// unmapping it when the cache gives it back costs more than the two
// preads of a ReadAt, so a segment touched once between two evictions is
// not mapped for it.
const mapAfterLookups = 4

// mapsForLookup is maps for a lookup of a record or two (ReadAt, and the
// index entry a reader starts from). The caller holds the generation.
func (f *segFiles) mapsForLookup(l *Log, s *segment) (logMap, indexMap []byte) {
	if f.reopened && f.lookups.Load() < mapAfterLookups && f.lookups.Add(1) <= mapAfterLookups {
		return nil, nil
	}
	return f.maps(l, s)
}

// readMapper is implemented by files that can be mapped shared and
// read-only (the real file system on Linux).
type readMapper interface {
	// MapRead maps the first n bytes of the file shared and read-only; n
	// may reach past the end of the file, where no byte may be touched.
	MapRead(n int) ([]byte, error)
}

// newSegFiles makes a generation held by its segment alone.
func newSegFiles(log, index file, size int64, compacted bool) *segFiles {
	f := &segFiles{log: log, index: index, size: size, compacted: compacted}
	f.refs.Store(1)
	return f
}

// tryAcquire takes a reference to the generation unless it is closed.
func (f *segFiles) tryAcquire() bool {
	for {
		n := f.refs.Load()
		if n <= 0 || f.closed.Load() {
			return false
		}
		if f.refs.CompareAndSwap(n, n+1) {
			break
		}
	}
	if f.closed.Load() {
		// closeFiles ran meanwhile: the segment is gone.
		f.release()
		return false
	}
	return true
}

// release gives a reference back; the last one closes the files and
// unmaps them. Nil is allowed.
func (f *segFiles) release() {
	if f != nil && f.refs.Add(-1) == 0 {
		f.free()
	}
}

// free closes the files and unmaps them once the references are gone.
func (f *segFiles) free() {
	f.closeHandles()
	// No holder is left to touch the mappings, and none can come:
	// tryAcquire takes no reference from zero.
	unmap(f.logMap)
	unmap(f.indexMap)
	f.logMap, f.indexMap = nil, nil
}

// closeHandles closes the descriptors, once.
func (f *segFiles) closeHandles() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fdsClosed {
		return
	}
	f.fdsClosed = true
	if f.log != nil {
		f.log.Close()
	}
	if f.index != nil {
		f.index.Close()
	}
}

// maps returns the generation's read-only mappings of its log and index
// (either may be nil), mapping them on first use. The caller holds the
// generation. A first generation of a segment still written is mapped as
// far as the segment can grow (mapLimits), so the mapping covers every
// record published later; bytes past the end of the file are never
// touched, because readers stop at the published size.
func (f *segFiles) maps(l *Log, s *segment) (logMap, indexMap []byte) {
	f.mapOnce.Do(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.fdsClosed {
			return // pread, which reports the deletion, as before
		}
		logLen, indexLen := f.size, fileSize(f.index)
		if f.size == 0 {
			size, end := s.bounds()
			logLen = size
			if !s.sealed.Load() || s.writing.Load() {
				logLen, indexLen, _ = l.mapLimits(size, indexBytesFor(int64(end-s.base)), 0)
			}
		}
		f.logMap = mapRead(f.log, logLen)
		f.indexMap = mapRead(f.index, indexLen)
	})
	return f.logMap, f.indexMap
}

// mapRead maps f's first n bytes read-only, or returns nil where f cannot
// be mapped (not a readMapper, no address space, any failure): the
// readers then go by pread, which is always right.
func mapRead(f file, n int64) []byte {
	rm, ok := f.(readMapper)
	if !ok || n <= 0 || n > math.MaxInt || math.MaxInt == math.MaxInt32 {
		// In a 32-bit address space the readers' mappings of every
		// segment they touch would crowd out the writer's, which appends
		// cannot go without: pread there.
		return nil
	}
	m, err := rm.MapRead(int(n))
	if err != nil {
		return nil
	}
	return m
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

// closeFiles releases the read handles of every generation, at once: the
// segment is being deleted (or the log closed).
func (s *segment) closeFiles() {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	cur := s.files.Load()
	for _, f := range append(s.retired, cur) {
		if f != nil {
			f.closed.Store(true)
			f.closeHandles()
		}
	}
	// The segment's own hold on its current generation; compactions gave
	// theirs on the retired ones back when they swapped them out.
	cur.release()
	s.retired = nil
}

// segmentAt returns the segment (gone or not) whose range holds seq, or nil.
func (l *Log) segmentAt(seq uint64) *segment {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
	if i < 0 || seq >= segs[i].endNow() {
		return nil
	}
	return segs[i]
}

// locate finds where seq starts: its segment, that segment's current
// generation of files (held: the caller releases it) and the offset there.
// A seq older than the oldest segment (its records were acknowledged and
// deleted) moves to the oldest record kept. A seq compaction removed
// starts where the next record kept does, which a reader tells by its seq.
func (l *Log) locate(seq uint64) (*segment, *segFiles, int64, uint64, error) {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	if len(segs) == 0 {
		return nil, nil, 0, 0, ErrClosed
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
	if i < 0 {
		i, seq = 0, segs[0].base
	}
	for i+1 < len(segs) && segs[i].gone.Load() {
		i++
		seq = max(seq, segs[i].base)
	}
	at := func(seg *segment, off func(*segFiles) (int64, error), seq uint64) (*segment, *segFiles, int64, uint64, error) {
		f, err := l.acquireFiles(seg)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		if k := seg.keptFrom.Load(); seq < k {
			// Freed in place (punch.go): start at the first record kept,
			// or past the segment; the reader passes the seqs between.
			off = func(f *segFiles) (int64, error) {
				if k >= seg.endNow() {
					return seg.limit(f), nil
				}
				offs, err := l.indexEntries(seg, f, k, 1)
				off, _ := indexOffset(offs[0], f.compacted)
				return off, err
			}
		}
		o, err := off(f)
		if err != nil {
			f.release()
			return nil, nil, 0, 0, err
		}
		return seg, f, o, seq, nil
	}
	start := func(*segFiles) (int64, error) { return fileHeaderSize, nil }
	if i < len(segs) && segs[i].base == seq && segs[i].endNow() > seq {
		return at(segs[i], start, seq)
	}
	seg := segs[i]
	sealed := seg.sealed.Load()
	size, end := seg.bounds()
	if seq >= end {
		if sealed && i+1 < len(segs) {
			return at(segs[i+1], start, segs[i+1].base)
		}
		if seq > end {
			return nil, nil, 0, 0, fmt.Errorf("%w: seq %d is past the end %d", ErrNotFound, seq, end)
		}
		return at(seg, func(f *segFiles) (int64, error) {
			if f.size > 0 {
				return f.size, nil
			}
			return size, nil
		}, end)
	}
	return at(seg, func(f *segFiles) (int64, error) {
		offs, err := l.indexEntries(seg, f, seq, 1)
		if err != nil {
			return 0, err
		}
		off, _ := indexOffset(offs[0], f.compacted)
		return off, nil
	}, seq)
}

// segmentAfter returns the segment following s, or nil.
func (l *Log) segmentAfter(s *segment) *segment {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > s.base })
	if i < len(l.segs) {
		return l.segs[i]
	}
	return nil
}

// segmentFor returns the segment holding seq, or ErrNotFound.
func (l *Log) segmentFor(seq uint64) (*segment, error) {
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
	if i < 0 {
		if len(segs) == 0 {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: seq %d is older than the first retained record %d", ErrNotFound, seq, segs[0].base)
	}
	if seq >= segs[i].endNow() {
		return nil, fmt.Errorf("%w: seq %d has not been written", ErrNotFound, seq)
	}
	return segs[i], nil
}

// position returns where seq starts, for Stats.
func (l *Log) position(seq uint64) (Position, error) {
	seg, f, off, _, err := l.locate(seq)
	if err != nil {
		return Position{}, err
	}
	f.release()
	return Position{Segment: seg.base, Offset: off}, nil
}

func (l *Log) firstSeq() uint64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if len(l.segs) == 0 {
		return 0
	}
	return max(l.segs[0].base, l.segs[0].keptFrom.Load())
}

// openSealedLazily takes a segment that was sealed before Open from the
// directory listing alone: sealed segments were fsynced whole at rotation,
// so nothing in them needs recovering, and their files are opened, and
// their headers and index sizes checked, on first use (segFiles). One stat
// of the log per sealed segment is all Open spends on it; a stat costs
// microseconds on a virtual machine, and there may be thousands.
//
// Until then the index is counted at the size its record count implies
// (what a sound index has) and the time index at an estimate; first use
// puts the real sizes into Stats and the disk budget.
func (l *Log) openSealedLazily(seg *segment, next uint64) error {
	size, err := l.listedSize(segmentName(seg.base, logSuffix))
	if err != nil {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	if size > math.MaxUint32 || next-seg.base > math.MaxUint32 {
		return fmt.Errorf("%w: %s is %d bytes for seqs %d..%d, more than a segment can hold", ErrCorrupt, seg.path(logSuffix), size, seg.base, next)
	}
	seg.setExtent(size, next)
	seg.sealed.Store(true)
	seg.maxTime.Store(unknownTime)
	seg.indexBytes.Store(indexBytesFor(int64(next - seg.base)))
	// An entry for the first and the last record, and about one per
	// timeIndexIntervalBytes of log between them.
	seg.timeIndexBytes.Store(fileHeaderSize + (2+(size-fileHeaderSize)/timeIndexIntervalBytes)*timeIndexEntrySize)
	return nil
}

// acquireFiles returns seg's current generation of read handles, held
// (the caller releases it), opening them on first use. A failure to open
// is returned as is and tried again by the next call: it is not damage. A
// deleted segment gives ErrNotFound.
func (l *Log) acquireFiles(seg *segment) (*segFiles, error) {
	for {
		f := seg.files.Load()
		if f == nil {
			f, opened, err := l.openFiles(seg)
			if err != nil {
				return nil, err
			}
			if opened {
				// Held already, so the cache cannot give it back before
				// the caller has used it.
				l.cacheOpen(seg)
				return f, nil
			}
			continue // another call opened it meanwhile
		}
		if f.tryAcquire() {
			if !seg.used.Load() {
				seg.used.Store(true)
			}
			return f, nil
		}
		if seg.files.Load() == f {
			if f.closed.Load() {
				// Closed with the segment, not replaced by a compaction.
				return nil, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
			}
			// No reference left and not closed: the cache is giving the
			// generation back (evict, under filesMu). Once it has, the
			// next look opens the files again.
			seg.filesMu.Lock()
			seg.filesMu.Unlock() //lint:ignore SA2001 a wait for evict, which holds filesMu
		}
	}
}

// openFiles is acquireFiles when seg has no generation: under filesMu it
// opens one and returns it held for the caller, unless another call just
// did (then it returns nil and opened false).
func (l *Log) openFiles(seg *segment) (f *segFiles, opened bool, err error) {
	seg.filesMu.Lock()
	defer seg.filesMu.Unlock()
	if seg.files.Load() != nil {
		return nil, false, nil
	}
	if seg.closed {
		return nil, false, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
	}
	if seg.evicted && !l.readOnly && !seg.leftovers.Load() {
		if f, err = l.reopenEvicted(seg); err != nil {
			return nil, false, err
		}
		f.size = seg.gaveBack.size
	} else {
		before := seg.diskBytes()
		if f, err = l.openSealed(seg); err != nil {
			return nil, false, err
		}
		// Open counted the index files at their expected sizes.
		l.diskBytes.Add(seg.diskBytes() - before)
		if f.compacted {
			// A compacted log is written whole and fsynced before it
			// is swapped in, so the file's length is the generation's
			// size. The segment's may be older: a read-only view lists
			// segments once, and another process may have compacted
			// this one since.
			if n := fileSize(f.log); n > 0 {
				f.size = n
			}
		}
	}
	f.reopened = seg.evicted
	f.refs.Store(2) // the segment's and the caller's
	seg.used.Store(true)
	seg.files.Store(f)
	return f, true, nil
}

// maxOpenSealed is how many sealed segments the cache lets keep their
// read handles (two descriptors, and up to two mappings once read, each)
// while nobody holds them. Segments a reader or a Scan is in keep theirs
// beyond it, and so do those being written or sealed; the rest are opened
// again on use, at the cost of a few system calls, as at Open.
const maxOpenSealed = 64

// segCache is the set of sealed segments whose read handles may be open:
// those opened on use and those this process sealed. Past maxOpenSealed,
// adding one gives back the handles of others nobody holds, by the clock
// algorithm over segment.used, so that the descriptors and mappings a log
// holds do not grow with its segments. Its mu comes after the log's segMu
// in the lock order and before a segment's filesMu (evict takes that of
// each segment it looks at).
type segCache struct {
	mu   sync.Mutex
	segs []*segment // in the order they joined; hand is the clock's
	hand int
}

// cacheOpen adds seg, whose read handles are open, to the cache and, when
// that takes it past its bound, gives back the handles of others.
func (l *Log) cacheOpen(seg *segment) {
	c := &l.openSegs
	c.mu.Lock()
	defer c.mu.Unlock()
	if !seg.cached {
		seg.cached = true
		c.segs = append(c.segs, seg)
	}
	bound := maxOpenSealed
	if n := l.opts.openSealedForTesting; n > 0 {
		bound = n
	}
	// Two turns of the clock: the first may only clear reference bits.
	for steps := 2 * len(c.segs); len(c.segs) > bound && steps > 0; steps-- {
		if c.hand >= len(c.segs) {
			c.hand = 0
		}
		s := c.segs[c.hand]
		if s.used.Load() {
			s.used.Store(false)
			c.hand++
			continue
		}
		if !s.evict() {
			c.hand++
			continue
		}
		s.cached = false
		c.segs = slices.Delete(c.segs, c.hand, c.hand+1)
	}
}

// evict gives back the segment's own reference to its current generation
// if nobody else holds it, closing its files and unmapping them, and
// reports whether the segment can leave the cache: evicted, deleted, or
// with no handles. A segment being written or sealed, or one held, stays.
// One that holds no record stays open but leaves: opened again, its time
// index (with no entry) would be taken for damage and rebuilt.
func (s *segment) evict() bool {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	f := s.files.Load()
	switch {
	case s.closed || f == nil || s.endNow() == s.base:
		return true
	case !s.sealed.Load() || s.writing.Load():
		return false
	case !f.refs.CompareAndSwap(1, 0):
		return false // a reader, a Scan or a compaction is in it
	}
	// From zero nobody takes a reference (tryAcquire), and acquireFiles
	// waits on filesMu for the nil that has it open the files again.
	s.files.Store(nil)
	s.evicted = true
	s.gaveBack.size, s.gaveBack.compacted, s.gaveBack.indexed = f.size, f.compacted, f.index != nil
	f.free()
	return true
}

// reopenEvicted opens the files of a segment whose generation the cache
// gave back, without openSealed's checks and stats (about half the system
// calls of a lookup that opens its segment): they were made when that
// generation was opened, and while this process holds the directory's
// lock nothing else changes a segment's files (a compaction here swaps a
// generation in, and evict notes what the generation given back was). Not
// after a compaction whose swap failed midway (leftovers): the paths may
// name its files while the generation given back was the old one. A
// read-only view cannot know either and checks each time.
func (l *Log) reopenEvicted(seg *segment) (*segFiles, error) {
	log, err := l.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("diskqueue: %w", err)
	}
	var index file
	if seg.gaveBack.indexed {
		if index, err = l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0); err != nil {
			log.Close()
			return nil, fmt.Errorf("diskqueue: %w", err)
		}
	}
	return newSegFiles(log, index, 0, seg.gaveBack.compacted), nil
}

// openSealed opens a sealed segment's log and index and checks them: a
// damaged log header is only logged (readers check every record anyway and
// skip the damaged ones); an index that is missing, has a damaged header or
// the wrong size, or a time index of the wrong shape, is rebuilt from the
// log (a read-only queue goes without, and lookups scan the log). It
// records the index files' real sizes in seg.
func (l *Log) openSealed(seg *segment) (*segFiles, error) {
	log, err := l.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("diskqueue: %w", err)
	}
	fail := func(err error) (*segFiles, error) {
		log.Close()
		return nil, err
	}
	hdr, err := l.checkLogHeader(seg, log, seg.sizeNow())
	if err != nil {
		return fail(err)
	}
	if hdr.damage != nil && !hdr.intact {
		l.logger.Warn("diskqueue: segment header is damaged; its records are checked one by one and damaged ones skipped", "segment", seg.base, "err", hdr.damage)
	}
	count := int64(seg.endNow() - seg.base)
	timeBytes := l.statSize(seg.path(timeIndexSuffix))
	timeOK := timeBytes >= fileHeaderSize+timeIndexEntrySize && (timeBytes-fileHeaderSize)%timeIndexEntrySize == 0
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	indexBytes := fileSize(index)
	compacted := hdr.compacted
	rebuild := false
	switch {
	case errors.Is(err, os.ErrNotExist):
		rebuild = true
	case err != nil:
		return fail(fmt.Errorf("diskqueue: %w", err))
	default:
		ok, indexCompacted := l.segmentHeaderOK(index, magicIndex, seg.base)
		if hdr.damage != nil {
			// The index says what the log's header no longer can.
			compacted = indexCompacted
		}
		// An index of the other version belongs to the other generation
		// of the log (a compaction's files renamed into place by hand). A
		// compacted one is read whole once, for its checksum.
		want := indexBytesFor(count)
		if compacted {
			want = compactedIndexBytes(count)
		}
		if !timeOK || indexBytes != want || !ok || indexCompacted != compacted || compacted && !l.indexFileOK(index, indexBytes) {
			index.Close()
			index, rebuild = nil, true
		}
	}
	seg.indexBytes.Store(max(indexBytes, 0))
	seg.timeIndexBytes.Store(max(timeBytes, 0))
	if !compacted {
		if _, seq, punched, found := l.punchedPrefix(log, seg.base, seg.sizeNow()); punched {
			seg.keptFrom.Store(seg.endNow())
			if found {
				seg.keptFrom.Store(seq)
			}
		}
	}
	if !rebuild {
		return newSegFiles(log, index, 0, compacted), nil
	}
	if l.readOnly {
		if l.deletedMeanwhile(seg) {
			// A live writer deleted it (the log first, then its indexes)
			// while this view opened it: not damage.
			return fail(fmt.Errorf("diskqueue: segment %d: %w", seg.base, os.ErrNotExist))
		}
		l.logger.Warn("diskqueue: a sealed segment's indexes are damaged (read-only: not rebuilt); lookups in it scan the log", "segment", seg.base)
		return newSegFiles(log, nil, 0, compacted), nil
	}
	if err := l.rebuildIndexes(seg, log, compacted); err != nil {
		return fail(err)
	}
	if index, err = l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0); err != nil {
		return fail(fmt.Errorf("diskqueue: %w", err))
	}
	return newSegFiles(log, index, 0, compacted), nil
}

// indexFileOK reads a compacted segment's index of size bytes whole and
// checks its checksum.
func (l *Log) indexFileOK(f file, size int64) bool {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return false
	}
	return indexChecksumOK(b)
}
