package diskqueue

import (
	"errors"
	"fmt"
	"runtime/debug"
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

// tail is the append state of a segment that is written or waits to be
// sealed. The active one (l.t) is guarded by l.mu; once rotated out it
// belongs to the writer goroutine, which seals it.
type tail struct {
	seg *segment
	appendFiles
	size                int64  // log bytes written
	end                 uint64 // seq after the last written record
	indexSize, timeSize int64
	lastTimeOff         int64  // log offset of the record with the last time-index entry
	lastTimeSeq         uint64 // its seq; maxSeq while the segment has none
	maxTime             int64  // running maximum of record timestamps, across segments
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
	if err := l.readyAppendFiles(&t.appendFiles, tryMap, t.size, t.indexSize, t.timeSize); err != nil {
		return fmt.Errorf("diskqueue: map segment %d: %w", t.seg.base, err)
	}
	return nil
}

// readyAppendFiles readies a's files, holding the given sizes, for
// appends (startAppending).
func (l *Log) readyAppendFiles(a *appendFiles, tryMap bool, size, indexSize, timeSize int64) error {
	*a = appendFiles{log: region{f: a.log.f}, index: region{f: a.index.f}, timeIdx: region{f: a.timeIdx.f}}
	if !tryMap {
		return nil
	}
	logMax, indexMax, timeMax := l.mapLimits(size, indexSize, timeSize)
	return a.mapAll([3]int64{size, indexSize, timeSize}, [3]int64{logMax, indexMax, timeMax})
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

// appendLocked writes one record, head (nil for none) followed by stored,
// to the active segment, rotating first if it is full, and returns its seq
// and timestamp; the timestamp also goes in the 8 bytes at stampAt of the
// record's body unless stampAt is negative (PutWithHead). The caller holds
// l.mu. On an error nothing of the record is left behind: ErrDiskFull
// (wrapping ENOSPC) comes before a byte is written; a failed write(2) is
// cut back.
func (l *Log) appendLocked(flags byte, head, stored []byte, stampAt int) (seq uint64, ts int64, err error) {
	n := int64(frameSize(len(head) + len(stored)))
	if t := l.t; t.punched || t.size > fileHeaderSize && (t.size+n > l.opts.MaxSegmentBytes || t.end-t.seg.base >= t.ackCap || t.timeFull()) {
		if err := l.rotateLocked(); err != nil {
			return 0, 0, err
		}
	}
	t := l.t
	ts = l.stampLocked()
	seq = t.end
	maxTime := max(t.maxTime, ts)
	timeEntry := t.lastTimeSeq == maxSeq || t.size-t.lastTimeOff >= timeIndexIntervalBytes
	if err := l.reserve(t, n, timeEntry); err != nil {
		return 0, 0, err
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
			encodeFrame(t.log.m[t.size:t.size+n], flags, seq, ts, head, stored, stampAt)
			t.copied = true
			if ahead := t.size + n + prefetchAhead; ahead < int64(len(t.log.m)) {
				prefetchWrite(&t.log.m[ahead])
			}
		} else {
			// A big frame goes in with one pwrite into the preallocated
			// file, which the mapping shares: the kernel copies it into
			// the page cache without the page faults a copy into fresh
			// pages of the mapping takes (see bigFrame).
			t.scratch = appendFrame(t.scratch[:0], flags, seq, ts, head, stored, stampAt)
			if _, err := t.log.f.WriteAt(t.scratch, t.size); err != nil {
				err = fmt.Errorf("diskqueue: write %s: %w", t.seg.path(logSuffix), err)
				l.failLocked(err)
				return 0, 0, err
			}
		}
	} else {
		t.scratch = appendFrame(t.scratch[:0], flags, seq, ts, head, stored, stampAt)
		if err := t.log.write(t.size, t.scratch); err != nil {
			return 0, 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(logSuffix), err))
		}
	}
	l.crashPoint("index-flush")
	indexSize, timeSize := t.indexSize, t.timeSize
	// The indexes are derived data, written after their record and
	// repaired at Open if a crash came between.
	if !l.opts.noIndexForTesting {
		if err := t.index.putEntry(t.indexSize, uint32(t.size)); err != nil {
			return 0, 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(indexSuffix), err))
		}
		t.indexSize += indexEntrySize
		if timeEntry {
			if err := t.timeIdx.write(t.timeSize, appendTimeEntry(nil, maxTime, seq)); err != nil {
				t.indexSize -= indexEntrySize
				return 0, 0, l.undoLocked(t, fmt.Errorf("diskqueue: write %s: %w", t.seg.path(timeIndexSuffix), err))
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
	return seq, ts, nil
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
	if terr := t.truncate(t.size, t.indexSize, t.timeSize); terr != nil {
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
