package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"
)

// The append path. A Put encodes its record straight into the active
// segment under l.mu and returns with it in the kernel's page cache: on
// Linux by copying into the segment's files mapped shared (no system call),
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
// is a multiple of allocUnit.
const (
	logChunk   = 1 << 20
	indexChunk = 256 << 10
	timeChunk  = 64 << 10
)

// region is one file of a segment being appended to.
type region struct {
	f     file
	m     []byte // the file mapped shared and writable; nil on the write path
	alloc int64  // bytes preallocated (the file's size); mapped path only
	chunk int64
	// prefaulted is how much of m the writer goroutine has asked the
	// kernel to populate; it and alloc are guarded by l.mu.
	prefaulted int64
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
	r := region{f: f, m: m, alloc: size, chunk: chunk}
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
		return nil
	}
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

// putEntry stores one big-endian uint32 at off. Into a mapping it is an
// atomic store, so a reader in another process that sees the index entry
// also sees the record it points at (the record was copied before it).
func (r *region) putEntry(off int64, v uint32) error {
	if r.m != nil {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&r.m[off])), binary.NativeEndian.Uint32(b[:]))
		return nil
	}
	_, err := r.f.WriteAt(binary.BigEndian.AppendUint32(nil, v), off)
	return err
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
	indexMax := max(fileHeaderSize+records*indexEntrySize, indexSize)
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
	ts := l.stamp()
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
		encodeRecord(t.log.m[t.size:t.size+n], flags, seq, ts, stored)
	} else {
		t.scratch = appendRecord(t.scratch[:0], flags, seq, ts, stored)
		if err := t.log.write(t.size, t.scratch); err != nil {
			return 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(logSuffix), err))
		}
	}
	l.crashPoint("index-flush")
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
	// nextSeq first: a record may be read and acknowledged as soon as its
	// segment's end is published, and Depth (nextSeq - floor) must not dip.
	l.nextSeq.Store(seq + 1)
	l.publishLocked(t)
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
	// Wake the writer once per preallocation step: when appends come
	// within half a chunk of its end, or allocated pages it has not
	// pre-faulted yet.
	if t.log.alloc != t.wokeAt && (t.log.alloc-(t.size+n) < logChunk/2 && t.log.alloc < l.opts.MaxSegmentBytes || t.log.prefaulted < t.log.alloc) {
		t.wokeAt = t.log.alloc
		l.wake()
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

// stamp is a record's timestamp: the wall clock at Open plus the monotonic
// time since, one clock read where time.Now takes two (a clock read is a
// good share of a Put on a virtual machine), and immune to the wall clock
// stepping while the queue is open.
func (l *Log) stamp() int64 {
	if l.opts.clockForTesting != nil {
		return l.opts.clockForTesting().UnixNano()
	}
	return l.started.Add(time.Since(l.started)).UnixNano()
}

// publishLocked makes what t holds visible to readers and to Stats: the
// extent last, so a reader that sees the record also sees its index sizes
// and timestamp. Each atomic store is a locked instruction on the hot path,
// so the index sizes and the newest timestamp are stored only when they
// changed.
func (l *Log) publishLocked(t *tail) {
	seg := t.seg
	prev := seg.diskBytes()
	if seg.indexBytes.Load() != t.indexSize {
		seg.indexBytes.Store(t.indexSize)
	}
	if seg.timeIndexBytes.Load() != t.timeSize {
		seg.timeIndexBytes.Store(t.timeSize)
	}
	if seg.maxTime.Load() != t.maxTime {
		seg.maxTime.Store(t.maxTime)
	}
	seg.setExtent(t.size, t.end)
	l.diskBytes.Add(seg.diskBytes() - prev)
}

// rotateLocked hands the active segment to the writer goroutine to seal
// and starts the next one at the active one's end. The caller holds l.mu.
func (l *Log) rotateLocked() error {
	old := l.t
	seg, t, err := l.createSegment(old.end, old.maxTime, old.mapped)
	if err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("%w: %w", ErrDiskFull, err)
		}
		return err
	}
	l.crashPoint("rotate-created")
	old.seg.sealed.Store(true) // its size and end are final
	l.sealQ = append(l.sealQ, old)
	l.t = t
	l.dirDirty = true
	l.segMu.Lock()
	l.segs = append(l.segs, seg)
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
		c.state(t.seg).ack = a
		c.readMu.Unlock()
	}
}

// createSegment creates the three files of a segment starting at base with
// their headers, and returns the segment (with its read handles) and its
// tail. It syncs nothing: the writer goroutine fsyncs the files and the
// directory before any record in them is reported durable.
func (l *Log) createSegment(base uint64, maxTime int64, mapped bool) (*segment, *tail, error) {
	seg := &segment{dir: l.dir, base: base}
	t := &tail{seg: seg, end: base, lastTimeSeq: maxSeq, maxTime: maxTime}
	var files [3]file
	fail := func(err error) (*segment, *tail, error) {
		t.log.release()
		t.index.release()
		t.timeIdx.release()
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		seg.closeFiles()
		for _, a := range t.acks {
			a.close()
			l.fs.Remove(a.name)
		}
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			l.fs.Remove(seg.path(suffix))
		}
		return nil, nil, fmt.Errorf("diskqueue: create segment %d: %w", base, err)
	}
	magics := [3][4]byte{magicLog, magicIndex, magicTimeIndex}
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		f, err := l.fs.OpenFile(seg.path(suffix), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fail(err)
		}
		files[i] = f
	}
	t.log.f, t.index.f, t.timeIdx.f = files[0], files[1], files[2]
	if err := l.startAppending(t, mapped); err != nil {
		return fail(err)
	}
	for i, r := range []*region{&t.log, &t.index, &t.timeIdx} {
		if err := r.ensure(fileHeaderSize); err != nil {
			return fail(err)
		}
		if err := r.write(0, appendFileHeader(nil, magics[i], base)); err != nil {
			return fail(err)
		}
	}
	t.size, t.indexSize, t.timeSize = fileHeaderSize, fileHeaderSize, fileHeaderSize
	t.ackCap = l.recordCapacity()
	for _, c := range l.cursors {
		a, err := c.createAckFile(seg, t.ackCap, mapped, true)
		if err != nil {
			return fail(err)
		}
		t.acks = append(t.acks, a)
	}
	log, err := l.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return fail(err)
	}
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil {
		log.Close()
		return fail(err)
	}
	seg.setFiles(log, index)
	seg.bitmaps.Store(int32(len(t.acks)))
	seg.writing.Store(true)
	seg.setExtent(fileHeaderSize, base)
	seg.indexBytes.Store(fileHeaderSize)
	seg.timeIndexBytes.Store(fileHeaderSize)
	seg.maxTime.Store(maxTime)
	return seg, t, nil
}

// seal finishes a segment nothing will append to any more: it closes the
// time index with the segment's last record (so SeekTime knows each sealed
// segment's newest timestamp without reading its log), unmaps the files,
// cuts each to what was written and fsyncs them (unless NoSync). Open then
// treats the segment as complete and never reads it at start-up.
func (l *Log) seal(t *tail) error {
	t.log.release()
	t.index.release()
	t.timeIdx.release()
	err := l.sealFiles(t)
	for _, r := range []*region{&t.log, &t.index, &t.timeIdx} {
		r.f.Close()
	}
	t.seg.writing.Store(false)
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
