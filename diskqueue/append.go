package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"unsafe"
)

// The append path. A Put encodes its record straight into the active
// segment under l.mu and returns with it in the kernel's page cache: on
// Linux by copying into the segment's files mapped shared (no system call;
// a frame of bigFrame bytes or more is written with one pwrite instead),
// elsewhere (or where the file system cannot preallocate or map) with the
// producer's own write(2). Either way a process crash loses nothing a Put
// returned for; what reaches stable storage, and when, is the sync policy's
// business (writer.go).
//
// On the mapped path the files are preallocated (fallocate) a chunk at a
// time ahead of the records, so a full disk shows as ErrDiskFull before a
// byte of a record is written, and a write into the mapping never meets a
// hole the file system has no block for. Sealing a segment truncates each
// file to what was written.

// allocUnit is the granularity of preallocation: every preallocated size
// is a multiple of it, and a sealed log is cut to its exact length. So a
// log whose size is a multiple of allocUnit may be one a crash left
// unsealed, and Open checks its tail (FORMAT.md).
const allocUnit = 4096

// Chunk sizes in which the active segment's files are preallocated. Each
// is a multiple of allocUnit. The log's is also how far ahead the preparer
// pre-faults (it is woken a chunk before the end): at 1 MiB a
// preparer the scheduler kept off a busy CPU for a millisecond or two
// left producers faulting on 2 to 4 times as many pages (34k against 11k
// to 18k over 4M Puts of 100 B, with other load on both cores).
const (
	logChunk   = 4 << 20
	indexChunk = 256 << 10
	timeChunk  = 64 << 10
)

// region is one file of a segment being appended to.
type region struct {
	f     file
	m     []byte // the file mapped shared and writable; nil on the write path
	alloc int64  // bytes preallocated (the file's size); mapped path only
	chunk int64
	// prefaulted is how much of m the preparer goroutine (or, for a
	// spare, the writer) has asked the kernel to populate; it and alloc
	// are guarded by l.mu.
	prefaulted int64
	// dropped is how much of m, from its start, has been taken out of the
	// mapping (dropWritten); guarded by l.dropMu.
	dropped int64
}

func roundUp(n, unit int64) int64 { return (n + unit - 1) / unit * unit }

// mapRegion maps f for appends up to limit bytes, with size bytes already
// written. It returns false, having changed nothing, if f cannot be mapped
// or preallocated here.
func mapRegion(f file, size, limit, chunk int64) (region, bool, error) {
	mf, ok := f.(mapper)
	if !ok {
		return region{f: f}, false, nil
	}
	limit = roundUp(max(limit, size), allocUnit)
	m, err := mf.Map(int(limit))
	if err != nil {
		if notSupported(err) {
			return region{f: f}, false, nil
		}
		return region{}, false, err
	}
	// Only what lies past the records written needs pre-faulting: a
	// recovered tail's old pages would only swell the resident set.
	r := region{f: f, m: m, alloc: size, chunk: chunk, prefaulted: size &^ (allocUnit - 1)}
	if size%allocUnit != 0 {
		// Preallocate to the next unit now, so the probe below tells at
		// Open whether this file system can.
		if err := r.ensure(roundUp(size, allocUnit)); err != nil && !isNoSpace(err) {
			unmap(m)
			if notSupported(err) {
				return region{f: f}, false, nil
			}
			return region{}, false, err
		}
	}
	return r, true, nil
}

// ensure makes [0, end) writable. On the mapped path it preallocates whole
// chunks, or, when the disk has no room for a chunk, just the pages end
// needs; on a failure nothing changes and the file keeps its size.
func (r *region) ensure(end int64) error {
	if r.m == nil || end <= r.alloc {
		return nil // inlined: every Put asks this of each of its files
	}
	return r.grow(end)
}

func (r *region) grow(end int64) error {
	if end > int64(len(r.m)) {
		return fmt.Errorf("diskqueue: %d bytes do not fit the %d-byte mapping", end, len(r.m))
	}
	mf := r.f.(mapper)
	// Grow by doubling up to a chunk, so a small queue stays small and a
	// busy one calls fallocate once per chunk.
	need := min(roundUp(end, allocUnit), int64(len(r.m)))
	step := min(r.chunk, max(allocUnit, r.alloc))
	want := min(max(need, roundUp(r.alloc+step, allocUnit)), int64(len(r.m)))
	err := mf.Allocate(r.alloc, want-r.alloc)
	if err != nil && isNoSpace(err) && need < want {
		// No room for the step; there may be for what this record needs.
		want = need
		err = mf.Allocate(r.alloc, want-r.alloc)
	}
	if err != nil {
		// Some file systems extend the file by what they managed before
		// failing; cut it back so its size stays a multiple of allocUnit.
		r.f.Truncate(r.alloc)
		return err
	}
	r.alloc = want
	return nil
}

// write copies b to off: into the mapping, or with write(2).
func (r *region) write(off int64, b []byte) error {
	if r.m != nil {
		copy(r.m[off:], b)
		return nil
	}
	_, err := r.f.WriteAt(b, off)
	return err
}

// putEntry stores one big-endian uint32 at off. Into a mapping it is one
// store, in order after the record's copy (storesInOrder, or else an
// atomic store), so a reader in another process that sees the index entry
// also sees the record it points at. This process's readers go by the
// segment's extent, published after it.
func (r *region) putEntry(off int64, v uint32) error {
	if r.m != nil {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		p := (*uint32)(unsafe.Pointer(&r.m[off])) // off is a multiple of 4
		if storesInOrder {
			*p = binary.NativeEndian.Uint32(b[:])
		} else {
			atomic.StoreUint32(p, binary.NativeEndian.Uint32(b[:]))
		}
		return nil
	}
	_, err := r.f.WriteAt(binary.BigEndian.AppendUint32(nil, v), off)
	return err
}

// sync makes the first n bytes of the file durable. On the mapped path
// only that range is written back (SyncMapped): the pages prefault dirtied
// past it stay writable, so the records copied there next take no fault.
func (r *region) sync(n int64) error {
	if r.m != nil {
		return r.f.(mapper).SyncMapped(r.m, n)
	}
	return r.f.Sync()
}

// dropWritten takes the pages wholly below end out of the mapping; they
// stay in the page cache, dirty or clean, and reads (pread) see them as
// before. Writeback then finds no mapping of them to write-protect:
// cleaning a mapped page costs a TLB shootdown, an interrupt of the CPU
// the producer runs on, per page, where this costs one for the range.
// Producers never touch a page below the records' end again (records are
// only appended), so none faults them back in. The caller holds l.dropMu.
func (r *region) dropWritten(end int64) {
	if r.m == nil {
		return
	}
	if to := end &^ int64(pageSize-1); to > r.dropped {
		dropPages(r.m[r.dropped:to])
		r.dropped = to
	}
}

// release unmaps the region; the file stays open.
func (r *region) release() {
	if r.m != nil {
		unmap(r.m)
		r.m = nil
	}
}

// tail is the append state of a segment that is written or waits to be
// sealed. The active one (l.t) is guarded by l.mu; once rotated out it
// belongs to the writer goroutine, which seals it.
type tail struct {
	seg                 *segment
	log, index, timeIdx region
	size                int64  // log bytes written
	end                 uint64 // seq after the last written record
	indexSize, timeSize int64
	lastTimeOff         int64  // log offset of the record with the last time-index entry
	lastTimeSeq         uint64 // its seq; maxSeq while the segment has none
	maxTime             int64  // running maximum of record timestamps, across segments
	mapped              bool
	scratch             []byte // the write path's frame buffer
	wokeAt              int64  // log.alloc when appends last woke the writer to prepare
	// copied says a record went into the mapping by copy (not pwrite)
	// since the preparer last looked: only then is the log worth
	// pre-faulting.
	copied bool
	// unaccounted is what appends added to the segment's disk usage
	// since the last flushLocked, not yet in l.diskBytes.
	unaccounted int64
	// punched is set once the consumed records' blocks were freed to roll
	// on a full disk: the segment takes no more appends.
	punched bool
	// acks are the cursors' acknowledgement files of the segment, whose
	// preallocation appends grow; ackCap is how many records the smallest
	// has room for: the segment rotates when it is reached.
	acks   []*ackFile
	ackCap uint64
}

// timeFull reports whether the mapped time index could not take the two
// entries a record and a later seal may add. Each Close seals the active
// segment with one more entry and the next Open appends to it again, so
// after enough restarts the estimate in mapLimits is not a bound.
func (t *tail) timeFull() bool {
	return t.mapped && t.timeSize+2*timeIndexEntrySize > int64(len(t.timeIdx.m))
}

// mapLimits are the largest sizes the active segment's three files can
// reach: a full segment, or a header and one record of the largest size.
func (l *Log) mapLimits(size, indexSize, timeSize int64) (int64, int64, int64) {
	logMax := max(l.opts.MaxSegmentBytes, fileHeaderSize+int64(frameSize(l.opts.MaxRecordBytes)), size)
	records := (logMax-fileHeaderSize)/recordHeaderSize + 1
	indexMax := max(indexBytesFor(records), indexSize)
	timeMax := max(fileHeaderSize+(logMax/timeIndexIntervalBytes+3)*timeIndexEntrySize, timeSize)
	return logMax, indexMax, timeMax
}

// startAppending readies t's files for appends: mapped where the kernel
// and file system allow (unless the write path was asked for), with
// write(2) otherwise.
func (l *Log) startAppending(t *tail, tryMap bool) error {
	t.log, t.index, t.timeIdx = region{f: t.log.f}, region{f: t.index.f}, region{f: t.timeIdx.f}
	if !tryMap {
		return nil
	}
	logMax, indexMax, timeMax := l.mapLimits(t.size, t.indexSize, t.timeSize)
	var rs [3]region
	for i, p := range []struct {
		f           file
		size, limit int64
		chunk       int64
	}{{t.log.f, t.size, logMax, logChunk}, {t.index.f, t.indexSize, indexMax, indexChunk}, {t.timeIdx.f, t.timeSize, timeMax, timeChunk}} {
		r, ok, err := mapRegion(p.f, p.size, p.limit, p.chunk)
		if err != nil || !ok {
			for _, done := range rs[:i] {
				done.release()
			}
			if err != nil {
				return fmt.Errorf("diskqueue: map segment %d: %w", t.seg.base, err)
			}
			return nil
		}
		rs[i] = r
	}
	t.log, t.index, t.timeIdx = rs[0], rs[1], rs[2]
	t.mapped = true
	return nil
}

// bigFrame is the frame size from which the mapped path writes a record
// with pwrite rather than a copy into the mapping: from there up the page
// faults of the copy (one per 4 KiB of fresh pages, and again after
// writeback write-protects them) cost more than the system call. Measured
// on the project's machine: 1 KiB bodies 1.7 µs with pwrite against 2.1
// with the copy, 64 KiB 30 against 87; 100-byte bodies stay with the copy.
const bigFrame = 1 << 10

// prefetchAhead is how far past a copied record the next records' two
// cache lines are fetched for writing (prefetchWrite). Fresh lines of the
// mapped log are in no cache: the copy's stores miss, and the locked
// instruction that publishes the record (setExtent) waits for them to
// drain, 27 ns of a 100-byte Put against 12 with the lines fetched
// ahead (perf, 4 M Puts).
const prefetchAhead = 256

// errFault is what a Put returns when touching a mapping faulted: the
// file was cut short or failed underneath the queue. It is sticky.
var errFault = errors.New("diskqueue: fault writing a mapped segment file (was it truncated or removed by another process?)")

// appendLocked writes one record to the active segment, rotating first if
// it is full, and returns its seq. The caller holds l.mu. On an error
// nothing of the record is left behind: ErrDiskFull (wrapping ENOSPC) comes
// before a byte is written; a failed write(2) is cut back.
func (l *Log) appendLocked(flags byte, stored []byte) (seq uint64, err error) {
	n := int64(frameSize(len(stored)))
	if t := l.t; t.punched || t.size > fileHeaderSize && (t.size+n > l.opts.MaxSegmentBytes || t.end-t.seg.base >= t.ackCap || t.timeFull()) {
		if err := l.rotateLocked(); err != nil {
			return 0, err
		}
	}
	t := l.t
	ts := l.stampLocked()
	seq = t.end
	maxTime := max(t.maxTime, ts)
	timeEntry := t.lastTimeSeq == maxSeq || t.size-t.lastTimeOff >= timeIndexIntervalBytes
	if err := l.reserve(t, n, timeEntry); err != nil {
		return 0, err
	}
	if t.mapped {
		// A fault on the mapping (the file cut short by another process,
		// an I/O error paging in) must not kill the process: turn it into
		// a panic here and the panic into a sticky error.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: segment %d: %v", errFault, t.seg.base, r)
				l.failLocked(err)
			}
		}()
		if n < bigFrame {
			encodeRecord(t.log.m[t.size:t.size+n], flags, seq, ts, stored)
			t.copied = true
			if ahead := t.size + n + prefetchAhead; ahead < int64(len(t.log.m)) {
				prefetchWrite(&t.log.m[ahead])
			}
		} else {
			// A big frame goes in with one pwrite into the preallocated
			// file, which the mapping shares: the kernel copies it into
			// the page cache without the page faults a copy into fresh
			// pages of the mapping takes (see bigFrame).
			t.scratch = appendRecord(t.scratch[:0], flags, seq, ts, stored)
			if _, err := t.log.f.WriteAt(t.scratch, t.size); err != nil {
				err = fmt.Errorf("diskqueue: write %s: %w", t.seg.path(logSuffix), err)
				l.failLocked(err)
				return 0, err
			}
		}
	} else {
		t.scratch = appendRecord(t.scratch[:0], flags, seq, ts, stored)
		if err := t.log.write(t.size, t.scratch); err != nil {
			return 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(logSuffix), err))
		}
	}
	l.crashPoint("index-flush")
	indexSize, timeSize := t.indexSize, t.timeSize
	// The indexes are derived data, written after their record and
	// repaired at Open if a crash came between.
	if !l.opts.noIndexForTesting {
		if err := t.index.putEntry(t.indexSize, uint32(t.size)); err != nil {
			return 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(indexSuffix), err))
		}
		t.indexSize += indexEntrySize
		if timeEntry {
			if err := t.timeIdx.write(t.timeSize, appendTimeEntry(nil, maxTime, seq)); err != nil {
				t.indexSize -= indexEntrySize
				return 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(timeIndexSuffix), err))
			}
			t.timeSize += timeIndexEntrySize
			t.lastTimeOff, t.lastTimeSeq = t.size, seq
		}
	}
	t.size += n
	t.end = seq + 1
	t.maxTime = maxTime
	l.unsynced++
	// What segment.diskBytes will count for the record once published:
	// the frame, the index entries and each cursor's bitmap growing with
	// the segment's record count.
	base := t.seg.base
	t.unaccounted += n + t.indexSize - indexSize + t.timeSize - timeSize +
		int64(t.seg.bitmaps.Load())*(ackFileSize(t.end-base)-ackFileSize(seq-base))
	l.publishLocked(t, timeEntry) // and so nextSeq
	return seq, nil
}

// reserve preallocates room for a frame of n bytes, its index entry and, if
// timeEntry, a time-index entry. Beyond what it needs now it lets the
// writer goroutine know when the next chunk should be prepared.
func (l *Log) reserve(t *tail, n int64, timeEntry bool) error {
	if !t.mapped {
		return nil
	}
	err := t.log.ensure(t.size + n)
	indexAlloc := t.index.alloc
	if err == nil {
		err = t.index.ensure(t.indexSize + indexEntrySize)
	}
	if err == nil && timeEntry {
		err = t.timeIdx.ensure(t.timeSize + timeIndexEntrySize)
	}
	for _, a := range t.acks {
		if err == nil {
			err = a.reserve(t.end - t.seg.base + 1)
		}
	}
	if err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("%w: %w", ErrDiskFull, err)
		}
		l.failLocked(err)
		return err
	}
	// Wake the preparer once per preallocation step: when appends come
	// within a chunk of its end, or allocated pages it has not
	// pre-faulted yet. The writer too, whose round makes the spare
	// segment when one is due.
	if t.log.alloc != t.wokeAt && (t.log.alloc-(t.size+n) < logChunk && t.log.alloc < l.opts.MaxSegmentBytes || t.log.prefaulted < t.log.alloc) {
		t.wokeAt = t.log.alloc
		l.wakePreparer()
		l.wake()
	} else if t.index.alloc != indexAlloc {
		// The index grew (appends preallocate it themselves): the
		// preparer pre-faults the new part.
		l.wakePreparer()
	}
	return nil
}

// undoLocked cuts a failed write(2) back off the active files, so the log
// ends on a record boundary. ENOSPC is not sticky: nothing of the record
// stays, and the next Put tries again. Anything else is.
func (l *Log) undoLocked(t *tail, err error) error {
	terr := t.log.f.Truncate(t.size)
	if terr == nil {
		terr = t.index.f.Truncate(t.indexSize)
	}
	if terr == nil {
		terr = t.timeIdx.f.Truncate(t.timeSize)
	}
	if terr != nil {
		err = fmt.Errorf("%w (and cutting the partial write back failed: %v)", errors.Join(err, errors.New("diskqueue: log needs recovery")), terr)
		l.failLocked(err)
		return err
	}
	if isNoSpace(err) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	l.failLocked(err)
	return err
}

// publishLocked makes what t holds visible to readers: the time index's
// size (stored only when it changed), then the extent, so a reader that
// sees the record also sees its time-index entry. Each atomic store or add
// is a locked instruction on the hot path, so the sequence index's size
// and the disk usage follow only with the time-index entries, about every
// 4 KiB of log (flushLocked). Readers do not go by the index's size (one
// entry per seq); it counts for the disk usage only.
func (l *Log) publishLocked(t *tail, timeEntry bool) {
	seg := t.seg
	if timeEntry {
		seg.timeIndexBytes.Store(t.timeSize)
		l.flushLocked(t)
	}
	seg.setExtent(t.size, t.end)
}

// flushLocked publishes the active segment's index size and adds the
// bytes appended since the last flush to the disk usage. Rotation, the
// writer's rounds (before retention looks) and each time-index entry
// call it; fullLocked counts t.unaccounted itself, so the disk budget is
// exact. Every other change to a segment's disk usage adds its own
// difference, so none counts these bytes twice. The caller holds l.mu.
func (l *Log) flushLocked(t *tail) {
	if t.seg.indexBytes.Load() != t.indexSize {
		t.seg.indexBytes.Store(t.indexSize)
	}
	if t.unaccounted != 0 {
		l.diskBytes.Add(t.unaccounted)
		t.unaccounted = 0
	}
}

// rotateLocked hands the active segment to the writer goroutine to seal
// and starts the next one at the active one's end. The caller holds l.mu.
func (l *Log) rotateLocked() error {
	old := l.t
	seg, t := l.takeSpareLocked(old.end, old.maxTime)
	if seg == nil {
		var err error
		if seg, t, err = l.createSegment(old.end, old.maxTime, old.mapped); err != nil {
			if isNoSpace(err) {
				return fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
			return err
		}
	}
	l.crashPoint("rotate-created")
	l.flushLocked(old)
	old.seg.sealed.Store(true) // its size and end are final
	l.sealQ = append(l.sealQ, old)
	l.t = t
	l.dirDirty = true
	l.segMu.Lock()
	l.segs = append(l.segs, seg)
	l.nextSeq.last.Store(seg) // its end, its base, is old's
	l.diskBytes.Add(seg.diskBytes())
	l.segMu.Unlock()
	l.adoptBitmaps(t)
	l.wake()
	return nil
}

// adoptBitmaps hands each cursor its acknowledgement file of a new active
// segment. The caller holds l.mu.
func (l *Log) adoptBitmaps(t *tail) {
	for _, a := range t.acks {
		c := a.owner
		c.readMu.Lock()
		c.installLocked(c.state(t.seg), a)
		c.readMu.Unlock()
	}
}

// createSegment creates the three files of a segment starting at base with
// their headers (and each cursor's acknowledgement file), and returns the
// segment (with its read handles) and its tail. It syncs nothing: the
// writer goroutine fsyncs the files and the directory before any record in
// them is reported durable.
func (l *Log) createSegment(base uint64, maxTime int64, mapped bool) (*segment, *tail, error) {
	seg := &segment{dir: l.dir, base: base}
	f, err := l.makeSegmentFiles([3]string{seg.path(logSuffix), seg.path(indexSuffix), seg.path(timeIndexSuffix)},
		l.cursors, func(c *Cursor) string { return c.ackPath(seg) }, base, mapped, fileHeaderSize, true)
	if err != nil {
		return nil, nil, fmt.Errorf("diskqueue: create segment %d: %w", base, err)
	}
	seg, t := f.install(l, base, maxTime)
	return seg, t, nil
}

// segmentFiles are a segment's open files before it joins the log: the
// three being appended to, the read handles, and each cursor's bitmap
// (in the order of l.cursors when they were made).
type segmentFiles struct {
	names               [3]string
	log, index, timeIdx region
	mapped              bool
	readLog, readIndex  file
	acks                []*ackFile
}

// makeSegmentFiles creates a segment's files under names (and a bitmap for
// each of cursors, under ackName(cursor)), readied for appends with at least prealloc
// bytes of the log preallocated (on the mapped path), and opens its read
// handles. With headers set the files get their headers for base at once
// (so a reader in another process meets zeros there only briefly);
// otherwise (a spare) writeHeaders writes them when the base is known.
func (l *Log) makeSegmentFiles(names [3]string, cursors []*Cursor, ackName func(*Cursor) string, base uint64, mapped bool, prealloc int64, headers bool) (*segmentFiles, error) {
	sf := &segmentFiles{names: names}
	fail := func(err error) (*segmentFiles, error) {
		sf.discard(l)
		return nil, err
	}
	var t tail
	for i, name := range names {
		f, err := l.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, l.opts.FileMode)
		if err != nil {
			return fail(err)
		}
		[]*region{&sf.log, &sf.index, &sf.timeIdx}[i].f = f
	}
	t.log.f, t.index.f, t.timeIdx.f = sf.log.f, sf.index.f, sf.timeIdx.f
	if err := l.startAppending(&t, mapped); err != nil {
		return fail(err)
	}
	sf.log, sf.index, sf.timeIdx, sf.mapped = t.log, t.index, t.timeIdx, t.mapped
	for _, r := range []*region{&sf.index, &sf.timeIdx} {
		if err := r.ensure(fileHeaderSize); err != nil {
			return fail(err)
		}
	}
	if err := sf.log.ensure(max(prealloc, fileHeaderSize)); err != nil {
		return fail(err)
	}
	if headers {
		if err := sf.writeHeaders(base); err != nil {
			return fail(err)
		}
	}
	for _, c := range cursors {
		a, err := c.createAckFileAt(ackName(c), base, l.recordCapacity(), mapped, true)
		if err != nil {
			return fail(err)
		}
		sf.acks = append(sf.acks, a)
	}
	var err error
	if sf.readLog, err = l.fs.OpenFile(names[0], os.O_RDONLY, 0); err != nil {
		return fail(err)
	}
	if sf.readIndex, err = l.fs.OpenFile(names[1], os.O_RDONLY, 0); err != nil {
		return fail(err)
	}
	return sf, nil
}

// writeHeaders writes the three file headers and the bitmaps' for base.
func (sf *segmentFiles) writeHeaders(base uint64) error {
	magics := [3][4]byte{magicLog, magicIndex, magicTimeIndex}
	for i, r := range []*region{&sf.log, &sf.index, &sf.timeIdx} {
		if err := r.write(0, appendFileHeader(nil, magics[i], base)); err != nil {
			return err
		}
	}
	for _, a := range sf.acks {
		if err := a.writeAt(encodeAckHeader(base, 0, 0), 0); err != nil {
			return err
		}
	}
	return nil
}

// discard closes and removes everything sf made.
func (sf *segmentFiles) discard(l *Log) {
	for i, r := range []*region{&sf.log, &sf.index, &sf.timeIdx} {
		r.release()
		if r.f != nil {
			r.f.Close()
			l.fs.Remove(sf.names[i])
		}
	}
	for _, f := range []file{sf.readLog, sf.readIndex} {
		if f != nil {
			f.Close()
		}
	}
	for _, a := range sf.acks {
		a.close()
		l.fs.Remove(a.name)
	}
}

// install makes the segment and its tail from files whose headers say
// base.
func (sf *segmentFiles) install(l *Log, base uint64, maxTime int64) (*segment, *tail) {
	seg := &segment{dir: l.dir, base: base}
	t := &tail{seg: seg, end: base, lastTimeSeq: maxSeq, maxTime: maxTime,
		log: sf.log, index: sf.index, timeIdx: sf.timeIdx, mapped: sf.mapped,
		size: fileHeaderSize, indexSize: fileHeaderSize, timeSize: fileHeaderSize,
		acks: sf.acks, ackCap: l.recordCapacity()}
	seg.setFiles(sf.readLog, sf.readIndex)
	seg.bitmaps.Store(int32(len(t.acks)))
	seg.writing.Store(true)
	seg.setExtent(fileHeaderSize, base)
	seg.indexBytes.Store(fileHeaderSize)
	seg.timeIndexBytes.Store(fileHeaderSize)
	seg.maxTime.Store(maxTime)
	return seg, t
}

// spareName is the name of a spare segment's file with the given suffix.
const spareName = "next"

// spare is a segment's files made ahead of need by the writer goroutine
// (prepareSpare) under spare names, preallocated and pre-faulted, so a
// rotation renames them into place rather than creating, allocating and
// mapping files while producers wait. Only the mapped path has one.
type spare struct {
	files   *segmentFiles
	cursors []*Cursor // the cursors its bitmaps are for
}

// takeSpareLocked turns the spare into the segment starting at base, or
// returns nil if there is none it can use (made for another set of
// cursors, or a rename failed: the rotation then creates the files). The
// headers are written before the renames and the log is renamed last, so
// a crash leaves either spare files (removed at Open) or a segment whose
// files that exist are whole: missing indexes are rebuilt, a missing
// bitmap is created. The caller holds l.mu.
func (l *Log) takeSpareLocked(base uint64, maxTime int64) (*segment, *tail) {
	sp := l.spare
	l.spare = nil
	if sp == nil {
		return nil, nil
	}
	if !slices.Equal(sp.cursors, l.cursors) {
		sp.files.discard(l)
		return nil, nil
	}
	sf := sp.files
	if err := sf.writeHeaders(base); err != nil {
		sf.discard(l)
		return nil, nil
	}
	seg := &segment{dir: l.dir, base: base}
	for i, a := range sf.acks {
		name := sp.cursors[i].ackPath(seg)
		if err := l.fs.Rename(a.name, name); err != nil {
			l.logger.Warn("diskqueue: cannot use the spare segment; creating one", "err", err)
			sf.discard(l)
			return nil, nil
		}
		a.name = name
		sp.cursors[i].newFiles.Store(true)
	}
	for i := 2; i >= 0; i-- { // the log last
		name := seg.path([]string{logSuffix, indexSuffix, timeIndexSuffix}[i])
		if err := l.fs.Rename(sf.names[i], name); err != nil {
			l.logger.Warn("diskqueue: cannot use the spare segment; creating one", "err", err)
			sf.discard(l)
			for j := i + 1; j <= 2; j++ {
				l.fs.Remove(seg.path([]string{logSuffix, indexSuffix, timeIndexSuffix}[j]))
			}
			return nil, nil
		}
		sf.names[i] = name
		if i == 1 {
			l.crashPoint("spare-rename") // indexes in place, the log not yet
		}
	}
	l.sparesUsed.Add(1)
	return sf.install(l, base, maxTime)
}

// prepareSpare makes the spare segment when the active one is half full
// and there is none, outside l.mu. A failure (a full disk) only means the
// next rotation creates its files itself. Only the writer goroutine calls
// it.
func (l *Log) prepareSpare() {
	l.mu.Lock()
	t := l.t
	need := t != nil && t.mapped && l.spare == nil && !l.closed && t.size >= l.opts.MaxSegmentBytes/2
	cursors := slices.Clone(l.cursors)
	l.mu.Unlock()
	if !need {
		return
	}
	names := [3]string{filepath.Join(l.dir, spareName+logSuffix), filepath.Join(l.dir, spareName+indexSuffix), filepath.Join(l.dir, spareName+timeIndexSuffix)}
	// Made for the cursors of the snapshot: one added meanwhile (under
	// l.mu) makes the spare unusable, which the check below and
	// takeSpareLocked see; deleting one runs on this goroutine.
	sf, err := l.makeSegmentFiles(names, cursors, func(c *Cursor) string { return filepath.Join(c.dir, spareName+ackSuffix) },
		0, true, min(logChunk, l.opts.MaxSegmentBytes), false)
	if err != nil {
		return
	}
	prefault(sf.log.m[:sf.log.alloc])
	sf.log.prefaulted = sf.log.alloc
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spare != nil || l.closed || !slices.Equal(cursors, l.cursors) {
		sf.discard(l)
		return
	}
	l.spare = &spare{files: sf, cursors: cursors}
}

// dropSpare removes the spare segment, if any (at Close). The caller holds
// l.mu.
func (l *Log) dropSpareLocked() {
	if l.spare != nil {
		l.spare.files.discard(l)
		l.spare = nil
	}
}

// seal finishes a segment nothing will append to any more: it closes the
// time index with the segment's last record (so SeekTime knows each sealed
// segment's newest timestamp without reading its log), unmaps the files,
// cuts each to what was written and fsyncs them (unless NoSync). Open then
// treats the segment as complete and never reads it at start-up.
func (l *Log) seal(t *tail) error {
	l.prepMu.Lock() // the preparer may be pre-faulting t's log
	t.log.release()
	t.index.release()
	t.timeIdx.release()
	l.prepMu.Unlock()
	err := l.sealFiles(t)
	for _, r := range []*region{&t.log, &t.index, &t.timeIdx} {
		r.f.Close()
	}
	// Appends do not publish the newest timestamp (segMaxTime); from here
	// on it is final.
	t.seg.maxTime.Store(t.maxTime)
	t.seg.writing.Store(false)
	l.openSegs.add(t.seg) // its read handles are open: the cache bounds them from now on
	return err
}

func (l *Log) sealFiles(t *tail) error {
	if t.end > t.seg.base && t.lastTimeSeq != t.end-1 {
		e := appendTimeEntry(nil, t.maxTime, t.end-1)
		if _, err := t.timeIdx.f.WriteAt(e, t.timeSize); err != nil {
			return fmt.Errorf("diskqueue: seal %s: %w", t.seg.path(timeIndexSuffix), err)
		}
		t.timeSize += timeIndexEntrySize
		t.lastTimeSeq = t.end - 1
		prev := t.seg.diskBytes()
		t.seg.timeIndexBytes.Store(t.timeSize)
		l.diskBytes.Add(t.seg.diskBytes() - prev)
	}
	for _, a := range t.acks {
		// Acks touch only the bits of records that exist, all inside.
		if err := a.f.Truncate(ackFileSize(t.end - t.seg.base)); err != nil {
			return fmt.Errorf("diskqueue: seal %s: %w", a.name, err)
		}
	}
	// The log is cut last: a read-only view (Verify beside a live writer)
	// tells an unsealed segment by its log's preallocated size, so once
	// the log is exact, the other files must be too.
	for _, c := range []struct {
		r    *region
		size int64
		name string
	}{{&t.timeIdx, t.timeSize, timeIndexSuffix}, {&t.index, t.indexSize, indexSuffix}, {&t.log, t.size, logSuffix}} {
		if err := c.r.f.Truncate(c.size); err != nil {
			return fmt.Errorf("diskqueue: seal %s: %w", t.seg.path(c.name), err)
		}
	}
	if !l.opts.NoSync {
		for _, c := range []struct {
			r    *region
			name string
		}{{&t.log, logSuffix}, {&t.index, indexSuffix}, {&t.timeIdx, timeIndexSuffix}} {
			if err := c.r.f.Sync(); err != nil {
				// Sticky even for ENOSPC: after a failed fsync the kernel
				// may have dropped the pages, so writing again proves nothing.
				return fmt.Errorf("diskqueue: seal: fsync %s: %w", t.seg.path(c.name), err)
			}
		}
	}
	l.crashPoint("rotate-sealed")
	return nil
}
