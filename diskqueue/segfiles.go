package diskqueue

import (
	"io"
	"math"
	"sync"
	"sync/atomic"
)

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

// readLog fills b with the log bytes of generation f (held by the caller)
// at off: a copy out of m, f's log mapping, or a pread where there is
// none or touching it faults. Bytes past the end of the file read as zeros
// (the frame's checks then fail), as from pread.
func (f *segFiles) readLog(seg *segment, m, b []byte, off int64) error {
	if copyMapped(b, m, off) {
		return nil
	}
	if _, err := f.log.ReadAt(b, off); err != nil && err != io.EOF {
		return readError(seg, off, err)
	}
	return nil
}

// generations is a segment's hold on its read handles: its current
// generation of segFiles and those compactions retired, with what the
// segment cache gave back. Embedded in segment.
type generations struct {
	// files are the read handles shared by Read, ReadAt and Scan (mapped,
	// or pread), nil until opened: the segment's current generation. A
	// segment found sealed at Open is opened on first use
	// (Log.acquireFiles), so opening a queue costs no file opens per
	// sealed segment; the others get theirs when created; a compaction
	// swaps in a new generation. A sealed segment nobody holds may give
	// its generation back (segCache) and is opened again on its next use,
	// as at Open; evicted (under filesMu) says one was given back, and
	// gaveBack (under filesMu) what it was: its size, for a compacted one
	// whose extent still says the size before, and what opening it again
	// needs without checking its files anew. filesMu orders those opens,
	// the eviction and the swap against closeFiles, and against each
	// other. retired (under filesMu) are the generations compactions
	// replaced, which readers may still hold: closed by their last
	// release, or with the segment.
	files    atomic.Pointer[segFiles]
	filesMu  sync.Mutex
	retired  []*segFiles
	evicted  bool
	gaveBack struct {
		size               int64
		compacted, indexed bool
	}
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
