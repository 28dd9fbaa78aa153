package diskqueue

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
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

// fullRetryInterval is how often a Put waiting (BlockWhenFull) on a full
// file system tries again when nothing this queue did freed space: another
// process may have.
const fullRetryInterval = 100 * time.Millisecond

// writer is the state of the writer goroutine. Producers append records
// themselves (log.go); the writer goroutine does what should not hold them
// up: fsyncs by the sync policy (group commit for SyncEvery 1), sealing
// rotated segments, preallocating and pre-faulting ahead of the appends,
// storing the read cursor and deleting consumed segments. Nothing else
// touches these fields once Open returns.
type writer struct {
	cursor      *cursorFile
	persisted   uint64    // readSeq last stored in the cursor file
	persistedAt time.Time // when
	closeErr    error     // what Close returns
}

func (w *writer) closeFiles() {
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
	for {
		closing, tick := false, false
		select {
		case <-q.wakeCh:
		case <-ticker.C:
			tick = true
		case reply := <-q.emptyCh:
			reply <- q.empty()
			continue
		case <-q.closeCh:
			closing = true
		}
		if closing {
			q.finish()
			return
		}
		// One round: Sync waits for a round that started after it was
		// called, which makes it a barrier for deletions too.
		round := q.roundStarted.Add(1)
		if q.syncWaiters.Load() > 0 || q.unsyncedOver() || tick {
			q.syncNow()
		} else {
			q.sealPending()
		}
		q.prepareAhead()
		q.housekeep(time.Now())
		if tick {
			q.syncAcks()
			// A floor an error stopped (a failed bitmap read) moves here:
			// no later Ack lands on a record already acknowledged.
			q.readMu.Lock()
			q.advanceFloorLocked(nil)
			q.readMu.Unlock()
		}
		if tick || time.Since(q.w.persistedAt) >= cursorInterval {
			q.persistCursor()
		}
		q.roundDone.Store(round)
		q.synced.Notify()
	}
}

// unsyncedOver reports whether the sync policy wants an fsync now.
func (q *Queue) unsyncedOver() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.unsynced >= q.opts.SyncEvery
}

// syncNow makes every record appended so far durable: it seals the
// segments rotated out, fsyncs the directory if segments were created, and
// fsyncs the active log; then it releases the Puts and Syncs waiting for
// those records. Puts that arrive meanwhile wait for the next round, so
// concurrent Puts share one fsync (group commit).
func (q *Queue) syncNow() {
	if q.syncAlways {
		// The Puts just released by the last fsync are about to put
		// again; let them, so the next fsync serves them all rather than
		// the first to wake (group commit's convoy).
		runtime.Gosched()
	}
	q.mu.Lock()
	target := q.nextSeq.Load()
	active := q.t
	pend := q.sealQ
	q.sealQ = nil
	dirty := q.unsynced > 0
	dirDirty := q.dirDirty
	q.unsynced, q.dirDirty = 0, false
	failed := q.writeErr
	q.mu.Unlock()
	// Segments rotated out after this point wait for the next round, so
	// active's handles stay open until then.
	err := q.sealAll(pend)
	if failed != nil {
		return
	}
	if err == nil && dirDirty && !q.opts.NoSync {
		if err = q.fs.SyncDir(q.dir); err != nil {
			err = fmt.Errorf("diskqueue: fsync directory %s: %w", q.dir, err)
		}
	}
	if err == nil && dirty && !q.opts.NoSync {
		start := time.Now()
		if err = active.log.f.Sync(); err != nil {
			err = fmt.Errorf("diskqueue: fsync %s: %w", active.seg.path(logSuffix), err)
		} else {
			q.syncLatency.Record(time.Since(start))
			q.syncs.Add(1)
		}
	}
	if err != nil {
		q.fail(err)
	} else if target > q.syncedSeq.Load() {
		q.syncedSeq.Store(target)
	}
}

// sealPending seals the segments rotated out since the last call.
func (q *Queue) sealPending() error {
	q.mu.Lock()
	pend := q.sealQ
	q.sealQ = nil
	q.mu.Unlock()
	return q.sealAll(pend)
}

// sealAll seals segments rotated out, oldest first. Only the writer
// goroutine seals, so a tail's handles stay open until it does.
func (q *Queue) sealAll(pend []*tail) error {
	var first error
	for _, t := range pend {
		start := time.Now()
		if err := q.seal(t); err != nil {
			q.fail(err)
			if first == nil {
				first = err
			}
			continue
		}
		if !q.opts.NoSync {
			q.syncLatency.Record(time.Since(start))
			q.syncs.Add(1)
		}
	}
	return first
}

// prepareAhead preallocates the active segment's next log chunk and asks
// the kernel to fault its pages in, so producers rarely make the
// fallocate call themselves and never stop for a page fault. A failure
// here is left for the Put that needs the space to report.
func (q *Queue) prepareAhead() {
	q.mu.Lock()
	t := q.t
	if t == nil || !t.mapped {
		q.mu.Unlock()
		return
	}
	// Stay a chunk ahead, but not past what the segment can hold.
	if want := min(t.size+logChunk, q.opts.MaxSegmentBytes); want > t.log.alloc {
		t.log.ensure(want)
	}
	from, to := t.log.prefaulted, t.log.alloc
	t.log.prefaulted = to
	m := t.log.m
	q.mu.Unlock()
	// Only the writer goroutine unmaps (in seal), so m stays valid here.
	if to > from {
		prefault(m[from:to])
	}
}

// fail records a write or fsync error as sticky: after it, Put and Sync
// return it forever. A failed fsync is never retried, because the kernel may
// already have dropped the dirty pages it could not write.
func (q *Queue) fail(err error) {
	q.mu.Lock()
	q.failLocked(err)
	q.mu.Unlock()
}

func (q *Queue) failLocked(err error) {
	if q.writeErr == nil {
		q.writeErr = err
		q.log.Error("diskqueue: write failed; the queue accepts no more records", "err", err)
	}
	if q.failErr.Load() == nil {
		q.failErr.Store(&err)
	}
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
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

// housekeep deletes segments every record of which is acknowledged, except
// those retention keeps, and rolls a fully consumed active segment when the
// disk budget asks for it.
func (q *Queue) housekeep(now time.Time) {
	floor := q.ackFloor.Load()
	if q.rollRequested.Load() {
		q.rollRequested.Store(false)
		q.mu.Lock()
		if t := q.t; floor >= t.end && t.end > t.seg.base && q.writeErr == nil {
			err := q.rotateLocked()
			if errors.Is(err, ErrDiskFull) {
				// No room even for the next segment's first pages: the
				// active one holds nothing unacknowledged, so it goes first.
				err = q.recycleActiveLocked()
			}
			if err != nil && !errors.Is(err, ErrDiskFull) {
				q.failLocked(err)
			}
		}
		q.mu.Unlock()
		q.sealPending()
	}
	q.segMu.RLock()
	segs := q.segs
	q.segMu.RUnlock()
	// Candidates: sealed segments (never the last) every record of which
	// is acknowledged, whether the floor has passed them or an older
	// segment still holds unacknowledged records.
	done := func(s *segment) bool {
		return !s.writing.Load() && (s.endNow() <= floor || s.acked.Load() >= int64(s.endNow()-s.base))
	}
	var cands []int
	for i := 0; i < len(segs)-1; i++ {
		if !segs[i].gone.Load() && done(segs[i]) {
			cands = append(cands, i)
		}
	}
	// Keep the newest that retention allows, and delete the rest oldest
	// first.
	keep := len(cands) // cands[keep:] are kept
	var kept int64
	retain := q.opts.RetainBytes > 0 || q.opts.RetainAge > 0
	for k := len(cands) - 1; retain && k >= 0; k-- {
		s := segs[cands[k]]
		b := s.diskBytes()
		if q.opts.RetainBytes > 0 && kept+b > q.opts.RetainBytes {
			break
		}
		if q.opts.RetainAge > 0 && now.Sub(time.Unix(0, q.segMaxTime(s))) > q.opts.RetainAge {
			break
		}
		kept += b
		keep = k
	}
	// The disk budget outranks retention.
	if max := q.opts.MaxDiskBytes; max > 0 {
		var freed int64
		for k := 0; k < len(cands); k++ {
			if k < keep {
				freed += segs[cands[k]].diskBytes()
				continue
			}
			if q.diskBytes.Load()-freed <= max {
				break
			}
			freed += segs[cands[k]].diskBytes()
			keep = k + 1
		}
	}
	// Leading tombstones (nothing older left) go too.
	if keep == 0 && !(len(segs) > 1 && segs[0].gone.Load()) {
		return
	}
	// Store the cursor first so that, after a crash, it does not point into
	// a segment that no longer exists (Open would cope, but this is cheaper).
	q.persistCursor()
	del := make(map[int]bool, keep)
	for _, i := range cands[:keep] {
		del[i] = true
	}
	// The prefix of segments going or gone leaves the list; a segment
	// deleted behind an unacknowledged one leaves a tombstone.
	prefix := 0
	for prefix < len(segs)-1 && (del[prefix] || segs[prefix].gone.Load()) {
		prefix++
	}
	for i := range segs[:prefix] {
		if segs[i].gone.Load() {
			q.removeTombstone(segs[i].base)
			q.diskBytes.Add(-ackHeaderSize)
		} else {
			q.removeSegment(segs[i])
		}
	}
	for _, i := range cands[:keep] {
		if i >= prefix {
			q.ghostSegment(segs[i])
		}
	}
	if prefix > 0 {
		q.segMu.Lock()
		q.segs = append([]*segment(nil), q.segs[prefix:]...)
		q.segMu.Unlock()
	}
	q.updateDeleteHint()
	q.freed.Notify()
}

// recycleActiveLocked makes room to roll an active segment every record of
// which is acknowledged, on a file system too full to create the next
// segment beside it: it frees the old records' blocks (a hole punched in
// the log; its size and offsets stay, and the segment is deleted once
// sealed), then rolls. Retained segments are not punched: retention keeps
// them for replay. The caller holds q.mu and is the writer goroutine.
func (q *Queue) recycleActiveLocked() error {
	t := q.t
	p, ok := t.log.f.(puncher)
	if !ok || q.opts.RetainBytes > 0 || q.opts.RetainAge > 0 {
		return fmt.Errorf("%w: cannot free the consumed active segment in place", ErrDiskFull)
	}
	if err := p.PunchHole(fileHeaderSize, t.size-fileHeaderSize); err != nil {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	// Its records are gone now: nothing may be appended behind the hole,
	// so until the roll succeeds every Put rolls first (or reports the
	// disk full).
	t.punched = true
	q.log.Warn("diskqueue: file system full; freed the consumed active segment's blocks to roll it", "segment", t.seg.base, "bytes", t.size)
	return q.rotateLocked()
}

// ghostSegment deletes a fully acknowledged segment that older
// unacknowledged records keep from leaving the list: its acknowledgement
// file becomes a tombstone first, so a crash in between leaves a tombstone
// beside the log (Open finishes the deletion), never a gap taken for loss.
func (q *Queue) ghostSegment(s *segment) {
	q.readMu.Lock()
	if s.ack != nil {
		s.ack.close()
		s.ack = nil
	}
	before := s.diskBytes()
	s.gone.Store(true)
	q.diskBytes.Add(s.diskBytes() - before)
	q.readMu.Unlock()
	if err := q.writeTombstone(s); err != nil {
		q.log.Warn("diskqueue: cannot mark an acknowledged segment deleted; keeping it", "segment", s.base, "err", err)
		s.gone.Store(false)
		q.diskBytes.Add(before - ackHeaderSize)
		return
	}
	s.closeFiles()
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := q.fs.Remove(s.path(suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			q.log.Warn("diskqueue: cannot remove an acknowledged segment", "segment", s.base, "err", err)
		}
	}
}

// removeSegment deletes the files of a segment already dropped from q.segs.
// A failure is logged: the files stay and are cleaned up at the next Open.
func (q *Queue) removeSegment(s *segment) {
	s.closeFiles()
	q.closeAck(s)
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, ackSuffix} {
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

// finish runs when the writer exits: everything put is synced (unless
// NoSync), the active segment is cut to what was written and the cursor
// stored.
func (q *Queue) finish() {
	q.roundStarted.Add(1)
	q.syncNow()
	q.syncAcks()
	q.mu.Lock()
	t := q.t
	q.t = nil
	q.mu.Unlock()
	if t != nil {
		if err := q.seal(t); err != nil {
			q.fail(err)
		}
		// The last segment stays the one the next Open appends to.
		t.seg.sealed.Store(false)
	}
	q.persistCursor()
	q.roundDone.Store(q.roundStarted.Load())
	q.synced.Notify()
	if err := q.failErr.Load(); err != nil && q.w.closeErr == nil {
		q.w.closeErr = *err
	}
}

// empty carries out Empty: it rolls to a new segment, moves both cursors to
// its start and deletes every older segment.
func (q *Queue) empty() error {
	q.mu.Lock()
	if err := q.writeErr; err != nil {
		q.mu.Unlock()
		return err
	}
	if t := q.t; t.end > t.seg.base {
		if err := q.rotateLocked(); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	t := q.t
	q.readMu.Lock()
	q.rd.reset(t.seg, t.size, t.end)
	q.ackFloor.Store(t.end)
	q.ackedAbove.Store(0)
	q.inFlight.Store(0)
	q.readMu.Unlock()
	q.mu.Unlock()
	if q.opts.emptyHookForTesting != nil {
		q.opts.emptyHookForTesting() // producers may append and roll from here on
	}
	if err := q.sealPending(); err != nil {
		return err
	}
	q.persistCursor()
	// Producers may have rotated past t.seg meanwhile: only what came
	// before it goes.
	q.segMu.Lock()
	idx := slices.Index(q.segs, t.seg)
	old := slices.Clone(q.segs[:idx])
	q.segs = slices.Clone(q.segs[idx:])
	q.segMu.Unlock()
	for _, s := range old {
		if s.gone.Load() {
			q.removeTombstone(s.base)
			q.diskBytes.Add(-ackHeaderSize)
			continue
		}
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
