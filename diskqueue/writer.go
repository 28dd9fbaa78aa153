package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

// timeIndexIntervalBytes is how many log bytes pass between time-index
// entries (Kafka's index.interval.bytes default). The first and the last
// record of every segment always get one.
const timeIndexIntervalBytes = 4096

// cursorInterval is the least time between two stores of a moved read
// cursor outside the sync tick: it bounds how many acknowledged records a
// crash delivers again, at the cost of at most ten cursor fsyncs a second.
const cursorInterval = 100 * time.Millisecond

// stallRetryInterval is how long the writer waits before writing a batch
// again after ENOSPC when no space was freed in between.
const stallRetryInterval = 100 * time.Millisecond

// writer is the state of the writer goroutine, which alone writes the active
// segment, rotates, syncs, persists the cursor and deletes segments.
type writer struct {
	seg       *segment
	log       file // write handles of the active segment
	index     file
	timeIndex file
	cursor    *cursorFile

	size          int64  // log bytes written in seg
	end           uint64 // seq after the last written record
	indexSize     int64
	timeIndexSize int64
	lastTimeOff   int64  // log offset of the record with the last time-index entry
	lastTimeSeq   uint64 // its seq; maxSeq when the segment has no entry yet
	maxTime       int64  // running maximum of record timestamps, across segments

	unsynced    int       // records written since the last fsync
	persisted   uint64    // readSeq last stored in the cursor file
	persistedAt time.Time // when

	stalled  *batch // batch that hit ENOSPC, written again before anything new
	failed   error  // sticky write or fsync error: nothing more is written
	closeErr error  // what Close returns

	indexBuf []byte
	timeBuf  []byte
}

func (w *writer) closeFiles() {
	for _, f := range []file{w.log, w.index, w.timeIndex} {
		if f != nil {
			f.Close()
		}
	}
	w.log, w.index, w.timeIndex = nil, nil, nil
	if w.cursor != nil {
		w.cursor.close()
		w.cursor = nil
	}
}

// run is the writer goroutine.
func (q *Queue) run() {
	defer close(q.writerCh)
	ticker := time.NewTicker(q.opts.SyncInterval)
	defer ticker.Stop()
	var retry <-chan time.Time
	for {
		closing, tick := false, false
		select {
		case <-q.wakeCh:
		case <-ticker.C:
			tick = true
		case <-retry:
		case reply := <-q.emptyCh:
			reply <- q.empty()
			continue
		case <-q.closeCh:
			closing = true
		}
		retry = nil
		// Housekeeping first: deleting consumed segments is what frees the
		// space a stalled batch is waiting for.
		q.housekeep(time.Now())
		if q.w.stalled != nil && !q.retryStalled() {
			if closing {
				q.finish()
				return
			}
			retry = time.After(stallRetryInterval)
			continue
		}
		q.writePending()
		if tick || closing {
			q.syncIfDirty()
			q.persistCursor()
		} else if time.Since(q.w.persistedAt) >= cursorInterval {
			q.persistCursor()
		}
		if closing {
			q.finish()
			return
		}
	}
}

// writePending takes the pending batch and writes it, until none is left.
func (q *Queue) writePending() {
	for {
		if q.syncAlways {
			// The Puts just released by the last fsync are about to put
			// again; let them, so the next fsync serves them all rather
			// than the first to wake (group commit's convoy).
			runtime.Gosched()
		}
		q.mu.Lock()
		b := q.pending
		if b.n == 0 && !b.sync {
			q.mu.Unlock()
			return
		}
		buf := q.spare
		q.spare = nil
		if buf == nil {
			buf = make([]byte, 0, batchCap)
		}
		q.pending = &batch{buf: buf}
		q.mu.Unlock()
		q.taken.Notify()
		if !q.writeBatch(b) {
			return
		}
		q.recycle(b)
	}
}

// writeBatch writes b, syncs it if needed and reports the outcome to its
// waiters. It returns false if the batch stalled on ENOSPC or failed.
func (q *Queue) writeBatch(b *batch) bool {
	err := q.w.failed
	if err == nil {
		err = q.appendBatch(b)
	}
	if isNoSpace(err) && q.w.failed == nil {
		q.stall(b, err)
		return false
	}
	if err == nil {
		if b.sync || q.w.unsynced >= q.opts.SyncEvery {
			err = q.syncLog()
			if err == nil && !b.sync {
				// A policy sync, not a waiter's: cheap moment to store the cursor.
				q.persistCursor()
			}
		}
	}
	if err != nil {
		q.fail(err)
	}
	q.bufferedBytes.Add(-int64(len(b.buf) + b.n*indexEntrySize))
	q.written.Notify()
	if b.sync && err == nil {
		// Sync is a barrier: segments consumed before it are gone after it.
		q.housekeep(time.Now())
	}
	if b.commit != nil {
		b.commit.err = err
		close(b.commit.done)
	}
	return err == nil
}

// recycle hands a written batch's buffer back for the next swap. Buffers
// that grew for a huge record are dropped rather than kept.
func (q *Queue) recycle(b *batch) {
	if cap(b.buf) > 2*batchCap {
		return
	}
	q.mu.Lock()
	q.spare = b.buf[:0]
	q.mu.Unlock()
}

// stall handles a batch that hit ENOSPC. Without SyncEvery 1 its Puts have
// returned, so the batch is kept and written again once space returns, and
// new Puts fail with ErrDiskFull until then: nothing accepted is dropped.
// With SyncEvery 1 every record in it still has a Put waiting, so the
// unwritten part is dropped and those Puts get the error instead.
func (q *Queue) stall(b *batch, err error) {
	if q.syncAlways {
		q.dropUnwritten(b, err)
		return
	}
	q.w.stalled = b
	q.mu.Lock()
	q.fullErr = fmt.Errorf("%w: %w", ErrDiskFull, err)
	q.mu.Unlock()
	// Puts waiting for the writer to take a full buffer would wait for
	// ever; wake them to see the error.
	q.taken.Notify()
	q.log.Warn("diskqueue: disk full; holding records until space is freed", "segment", q.w.seg.base, "offset", q.w.size, "err", err)
}

// dropUnwritten fails the waiters of b's unwritten records and renumbers
// the records put after them, so the log keeps consecutive seqs.
func (q *Queue) dropUnwritten(b *batch, err error) {
	rest := b.buf[b.off:]
	dropped := uint64(countRecords(rest))
	q.mu.Lock()
	resequence(q.pending.buf, dropped)
	q.nextSeq.Add(-dropped)
	more := q.pending.n > 0
	q.mu.Unlock()
	if more {
		q.wake()
	}
	q.bufferedBytes.Add(-int64(len(b.buf) + b.n*indexEntrySize))
	q.written.Notify()
	if b.commit != nil {
		b.commit.err = fmt.Errorf("%w: %w", ErrDiskFull, err)
		close(b.commit.done)
	}
	q.log.Warn("diskqueue: disk full; failed the Puts waiting for it", "records", dropped, "err", err)
}

// countRecords counts the frames in an encoded batch.
func countRecords(buf []byte) int {
	n := 0
	for off := 0; off < len(buf); n++ {
		off += int(binary.BigEndian.Uint32(buf[off:])) + lengthSize
	}
	return n
}

// resequence lowers the seq of every frame in buf by d and recomputes its
// checksum. Only records no Put has returned for are renumbered.
func resequence(buf []byte, d uint64) {
	for off := 0; off < len(buf); {
		n := int(binary.BigEndian.Uint32(buf[off:])) + lengthSize
		frame := buf[off : off+n]
		binary.BigEndian.PutUint64(frame[9:17], binary.BigEndian.Uint64(frame[9:17])-d)
		binary.BigEndian.PutUint32(frame[4:8], frameCRC(frame))
		off += n
	}
}

// retryStalled writes the stalled batch again. It returns true once the
// writer may go on with new batches.
func (q *Queue) retryStalled() bool {
	b := q.w.stalled
	q.w.stalled = nil
	q.retriedWrites.Add(1)
	if !q.writeBatch(b) {
		return false
	}
	q.mu.Lock()
	q.fullErr = nil
	q.mu.Unlock()
	q.freed.Notify()
	return true
}

// fail records a write or fsync error as sticky: after it, Put and Sync
// return it forever. A failed fsync is never retried, because the kernel may
// already have dropped the dirty pages it could not write.
func (q *Queue) fail(err error) {
	q.mu.Lock()
	if q.writeErr == nil {
		q.writeErr = err
		q.log.Error("diskqueue: write failed; the queue accepts no more records", "segment", q.w.seg.base, "offset", q.w.size, "err", err)
	}
	q.mu.Unlock()
	if q.w.closeErr == nil {
		q.w.closeErr = err
	}
	if q.w.failed == nil {
		q.w.failed = err
	}
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// appendBatch writes b's records from b.off on, rotating where a segment is
// full, and advances b.off past what reached the file. On a failed write it
// cuts the partial bytes off so the log ends on a record boundary.
func (q *Queue) appendBatch(b *batch) error {
	w := &q.w
	for b.off < len(b.buf) {
		if w.rollNeeded(b, q.opts.MaxSegmentBytes) {
			if err := q.rotate(); err != nil {
				return err
			}
		}
		start := b.off
		pos, end, maxTime := w.size, w.end, w.maxTime
		lastTimeOff, lastTimeSeq := w.lastTimeOff, w.lastTimeSeq
		idx, tidx := w.indexBuf[:0], w.timeBuf[:0]
		off := start
		for off < len(b.buf) {
			n := int64(binary.BigEndian.Uint32(b.buf[off:])) + lengthSize
			if pos > fileHeaderSize && pos+n > q.opts.MaxSegmentBytes {
				break
			}
			if ts := int64(binary.BigEndian.Uint64(b.buf[off+17:])); ts > maxTime {
				maxTime = ts
			}
			idx = binary.BigEndian.AppendUint32(idx, uint32(pos))
			if lastTimeSeq == maxSeq || pos-lastTimeOff >= timeIndexIntervalBytes {
				tidx = appendTimeEntry(tidx, maxTime, end)
				lastTimeOff, lastTimeSeq = pos, end
			}
			pos += n
			end++
			off += int(n)
		}
		w.indexBuf, w.timeBuf = idx, tidx
		if _, err := w.log.WriteAt(b.buf[start:off], w.size); err != nil {
			return q.cutPartial(fmt.Errorf("diskqueue: write %s: %w", w.seg.path(logSuffix), err))
		}
		records := len(idx) / indexEntrySize
		if q.opts.noIndexForTesting {
			idx, tidx = idx[:0], tidx[:0]
		}
		q.crashPoint("index-flush")
		// The indexes are derived data: written after their records and
		// repaired at Open if a crash left them behind.
		if _, err := w.index.WriteAt(idx, w.indexSize); err != nil {
			return q.cutPartial(fmt.Errorf("diskqueue: write %s: %w", w.seg.path(indexSuffix), err))
		}
		if len(tidx) > 0 {
			if _, err := w.timeIndex.WriteAt(tidx, w.timeIndexSize); err != nil {
				return q.cutPartial(fmt.Errorf("diskqueue: write %s: %w", w.seg.path(timeIndexSuffix), err))
			}
		}
		w.size, w.end, w.maxTime = pos, end, maxTime
		w.lastTimeOff, w.lastTimeSeq = lastTimeOff, lastTimeSeq
		w.indexSize += int64(len(idx))
		w.timeIndexSize += int64(len(tidx))
		w.unsynced += records
		b.off = off
		q.publish()
	}
	return nil
}

// rollNeeded reports whether the next record of b must start a new segment
// because the active one is full. A record larger than a whole segment gets
// an otherwise empty segment of its own.
func (w *writer) rollNeeded(b *batch, maxSegment int64) bool {
	if w.size <= fileHeaderSize {
		return false
	}
	n := int64(binary.BigEndian.Uint32(b.buf[b.off:])) + lengthSize
	return w.size+n > maxSegment
}

// cutPartial truncates the active files back to the last complete write,
// so a failed write never leaves half a record for the next one to follow.
// If that fails too, the error is fatal for writes and recovery at the next
// Open trims the tail.
func (q *Queue) cutPartial(err error) error {
	w := &q.w
	terr := w.log.Truncate(w.size)
	if terr == nil {
		terr = w.index.Truncate(w.indexSize)
	}
	if terr == nil {
		terr = w.timeIndex.Truncate(w.timeIndexSize)
	}
	if terr != nil {
		return fmt.Errorf("%w (and truncating the partial write failed: %v)", errors.Join(err, errors.New("diskqueue: log needs recovery")), terr)
	}
	return err
}

// publish makes what the writer wrote visible to readers and to Stats.
func (q *Queue) publish() {
	w := &q.w
	prev := w.seg.diskBytes()
	w.seg.size.Store(w.size)
	w.seg.indexBytes.Store(w.indexSize)
	w.seg.timeIndexBytes.Store(w.timeIndexSize)
	w.seg.maxTime.Store(w.maxTime)
	w.seg.end.Store(w.end)
	q.diskBytes.Add(w.seg.diskBytes() - prev)
}

// syncLog fsyncs the active log file.
func (q *Queue) syncLog() error {
	w := &q.w
	if w.unsynced == 0 || q.opts.NoSync {
		w.unsynced = 0
		return nil
	}
	start := time.Now()
	if err := w.log.Sync(); err != nil {
		return fmt.Errorf("diskqueue: fsync %s: %w", w.seg.path(logSuffix), err)
	}
	q.syncLatency.Record(time.Since(start))
	q.syncs.Add(1)
	w.unsynced = 0
	return nil
}

// syncIfDirty is the SyncInterval tick.
func (q *Queue) syncIfDirty() {
	if err := q.syncLog(); err != nil {
		q.fail(err)
	}
}

// persistCursor stores the read cursor if it moved. A failure is logged and
// kept for Close: the cursor only decides what is delivered again after a
// crash, never whether data is lost, so it does not stop writes.
func (q *Queue) persistCursor() {
	w := &q.w
	floor := q.ackFloor.Load()
	if floor == w.persisted {
		return
	}
	q.crashPoint("cursor-persist")
	if err := w.cursor.store(floor); err != nil {
		q.log.Warn("diskqueue: cannot persist read cursor; acknowledged records may be delivered again after a crash", "err", err)
		if w.closeErr == nil {
			w.closeErr = err
		}
		return
	}
	w.persisted = floor
	w.persistedAt = time.Now()
}

// rotate seals the active segment and starts a new one at w.end.
func (q *Queue) rotate() error {
	w := &q.w
	old := w.seg
	// Close the time index with the segment's last record so SeekTime knows
	// each sealed segment's newest timestamp without reading its log.
	if w.end > old.base && w.lastTimeSeq != w.end-1 {
		e := appendTimeEntry(nil, w.maxTime, w.end-1)
		if _, err := w.timeIndex.WriteAt(e, w.timeIndexSize); err != nil {
			return fmt.Errorf("diskqueue: rotate: %w", err)
		}
		w.timeIndexSize += timeIndexEntrySize
		w.lastTimeSeq = w.end - 1
		q.publish()
	}
	// Sealed segments are never recovered at Open, so all three files must
	// be on stable storage before the writer moves on.
	if !q.opts.NoSync {
		start := time.Now()
		for _, f := range []file{w.log, w.index, w.timeIndex} {
			if err := f.Sync(); err != nil {
				// Sticky even for ENOSPC: after a failed fsync the kernel may
				// have dropped the pages, so writing again proves nothing.
				err = fmt.Errorf("diskqueue: rotate: fsync %s: %w", old.path(logSuffix), err)
				q.fail(err)
				return err
			}
		}
		q.syncLatency.Record(time.Since(start))
		q.syncs.Add(1)
		w.unsynced = 0
	}
	q.crashPoint("rotate-sealed")
	seg, files, err := q.createSegment(w.end)
	if err != nil {
		return err
	}
	q.crashPoint("rotate-created")
	old.sealed.Store(true)
	for _, f := range []file{w.log, w.index, w.timeIndex} {
		f.Close()
	}
	w.seg = seg
	w.log, w.index, w.timeIndex = files[0], files[1], files[2]
	w.size, w.indexSize, w.timeIndexSize = fileHeaderSize, fileHeaderSize, fileHeaderSize
	w.lastTimeOff, w.lastTimeSeq = 0, maxSeq
	q.segMu.Lock()
	q.segs = append(q.segs, seg)
	q.segMu.Unlock()
	q.diskBytes.Add(seg.diskBytes())
	q.updateDeleteHint()
	return nil
}

// createSegment creates the three files of a segment starting at base, makes
// them and the directory entry durable (so no acknowledged record can sit in
// a file a power cut makes vanish), and returns the segment with its read
// handles and the three write handles.
func (q *Queue) createSegment(base uint64) (*segment, [3]file, error) {
	seg := &segment{dir: q.dir, base: base}
	var files [3]file
	magics := [3][4]byte{magicLog, magicIndex, magicTimeIndex}
	suffixes := [3]string{logSuffix, indexSuffix, timeIndexSuffix}
	fail := func(err error) (*segment, [3]file, error) {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		seg.closeFiles()
		return nil, files, fmt.Errorf("diskqueue: create segment %d: %w", base, err)
	}
	for i := range files {
		f, err := q.fs.OpenFile(seg.path(suffixes[i]), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fail(err)
		}
		files[i] = f
		if _, err := f.WriteAt(appendFileHeader(nil, magics[i], base), 0); err != nil {
			return fail(err)
		}
		if !q.opts.NoSync {
			if err := f.Sync(); err != nil {
				return fail(err)
			}
		}
	}
	if !q.opts.NoSync {
		if err := q.fs.SyncDir(q.dir); err != nil {
			return fail(err)
		}
	}
	log, err := q.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return fail(err)
	}
	index, err := q.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil {
		log.Close()
		return fail(err)
	}
	seg.setFiles(log, index)
	seg.size.Store(fileHeaderSize)
	seg.indexBytes.Store(fileHeaderSize)
	seg.timeIndexBytes.Store(fileHeaderSize)
	seg.end.Store(base)
	seg.maxTime.Store(q.w.maxTime)
	return seg, files, nil
}

// housekeep deletes segments every record of which is acknowledged, except
// those retention keeps, and rolls a fully consumed active segment when the
// disk budget asks for it.
func (q *Queue) housekeep(now time.Time) {
	w := &q.w
	floor := q.ackFloor.Load()
	if q.rollRequested.Load() {
		q.rollRequested.Store(false)
		if floor >= w.end && w.end > w.seg.base && w.stalled == nil {
			if err := q.rotate(); err != nil {
				q.fail(err)
			}
		}
	}
	q.segMu.RLock()
	segs := q.segs
	q.segMu.RUnlock()
	// consumed: the prefix of sealed segments whose records are all acked.
	consumed := 0
	for consumed < len(segs)-1 && segs[consumed+1].base <= floor {
		consumed++
	}
	// Keep the newest consumed segments that retention allows, and delete
	// the rest oldest first.
	keepFrom := consumed
	var kept int64
	retain := q.opts.RetainBytes > 0 || q.opts.RetainAge > 0
	for i := consumed - 1; retain && i >= 0; i-- {
		b := segs[i].diskBytes()
		if q.opts.RetainBytes > 0 && kept+b > q.opts.RetainBytes {
			break
		}
		if q.opts.RetainAge > 0 && now.Sub(time.Unix(0, q.segMaxTime(segs[i]))) > q.opts.RetainAge {
			break
		}
		kept += b
		keepFrom = i
	}
	// The disk budget outranks retention.
	if max := q.opts.MaxDiskBytes; max > 0 {
		for keepFrom < consumed && q.diskBytes.Load()+q.bufferedBytes.Load()-bytesOf(segs[:keepFrom]) > max {
			keepFrom++
		}
	}
	if keepFrom == 0 {
		return
	}
	// Store the cursor first so that, after a crash, it does not point into
	// a segment that no longer exists (Open would cope, but this is cheaper).
	q.persistCursor()
	q.segMu.Lock()
	q.segs = append([]*segment(nil), q.segs[keepFrom:]...)
	q.segMu.Unlock()
	for _, s := range segs[:keepFrom] {
		q.removeSegment(s)
	}
	q.updateDeleteHint()
	q.freed.Notify()
}

func bytesOf(segs []*segment) int64 {
	var n int64
	for _, s := range segs {
		n += s.diskBytes()
	}
	return n
}

// removeSegment deletes the files of a segment already dropped from q.segs.
// A failure is logged: the files stay and are cleaned up at the next Open.
func (q *Queue) removeSegment(s *segment) {
	s.closeFiles()
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if i == 1 {
			q.crashPoint("retention-delete") // the log is gone, its indexes not yet
		}
		if err := q.fs.Remove(s.path(suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			q.log.Warn("diskqueue: cannot remove consumed segment", "segment", s.base, "err", err)
		}
	}
	q.diskBytes.Add(-s.diskBytes())
}

// updateDeleteHint tells Ack from which read cursor on there is a segment
// to delete, so acks wake the writer only when they cross a segment
// boundary.
func (q *Queue) updateDeleteHint() {
	q.segMu.RLock()
	defer q.segMu.RUnlock()
	floor := q.ackFloor.Load()
	hint := uint64(maxSeq)
	for i := 0; i < len(q.segs)-1; i++ {
		if q.segs[i+1].base > floor {
			hint = q.segs[i+1].base
			break
		}
	}
	q.deleteHint.Store(hint)
}

// finish runs when the writer exits: everything put is written and synced,
// the cursor stored.
func (q *Queue) finish() {
	if q.w.stalled != nil {
		// The disk is still full: what is held cannot be written in order,
		// so nothing after it is either. Close reports how much was lost.
		q.mu.Lock()
		rest := q.pending
		q.pending = &batch{}
		q.mu.Unlock()
		lost := q.w.stalled.n + rest.n
		err := fmt.Errorf("%w: %d records could not be written before Close", ErrDiskFull, lost)
		q.log.Error("diskqueue: closing with records that could not be written", "records", lost, "err", err)
		for _, b := range []*batch{q.w.stalled, rest} {
			if b.commit != nil {
				b.commit.err = err
				close(b.commit.done)
			}
		}
		q.w.stalled = nil
		if q.w.closeErr == nil {
			q.w.closeErr = err
		}
	} else {
		q.writePending()
	}
	q.syncIfDirty()
	q.persistCursor()
}

// empty carries out Empty: it moves both cursors to the end of what is
// written, rolls to a new segment and deletes every older one.
func (q *Queue) empty() error {
	w := &q.w
	if w.stalled == nil {
		q.writePending()
	}
	if b := w.stalled; b != nil {
		// Held for lack of space; Empty discards it like everything else.
		w.stalled = nil
		q.bufferedBytes.Add(-int64(len(b.buf) + b.n*indexEntrySize))
		if b.commit != nil {
			b.commit.err = fmt.Errorf("diskqueue: record discarded by Empty before it could be written: %w", ErrDiskFull)
			close(b.commit.done)
		}
		q.mu.Lock()
		q.fullErr = nil
		q.mu.Unlock()
	}
	if w.failed != nil {
		return w.failed
	}
	q.readMu.Lock()
	q.rd.reset(w.seg, w.size, w.end)
	q.ackFloor.Store(w.end)
	clear(q.acked)
	q.inFlight.Store(0)
	q.readMu.Unlock()
	if w.end > w.seg.base {
		if err := q.rotate(); err != nil {
			return err
		}
	}
	q.persistCursor()
	q.segMu.Lock()
	old := q.segs[:len(q.segs)-1]
	q.segs = []*segment{w.seg}
	q.segMu.Unlock()
	// The reader was reset to the old segment's end; point it at the new one.
	q.readMu.Lock()
	if q.rd.seg != w.seg && q.rd.seq == w.end {
		q.rd.reset(w.seg, w.size, w.end)
	}
	q.readMu.Unlock()
	for _, s := range old {
		q.removeSegment(s)
	}
	q.updateDeleteHint()
	q.freed.Notify()
	return nil
}

// crashPoint gives the crash test a chance to die at a named moment (the
// names are listed in export_test.go).
func (q *Queue) crashPoint(name string) {
	if q.opts.crashPointForTesting != nil {
		q.opts.crashPointForTesting(name)
	}
}

func appendTimeEntry(dst []byte, ts int64, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return binary.BigEndian.AppendUint64(dst, seq)
}
