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
	closeErr error // what Close returns
}

// run is the writer goroutine.
func (l *Log) run() {
	defer close(l.writerCh)
	ticker := time.NewTicker(l.opts.SyncInterval)
	defer ticker.Stop()
	for {
		closing, tick := false, false
		select {
		case <-l.wakeCh:
		case <-ticker.C:
			tick = true
		case r := <-l.reqCh:
			r.reply <- r.fn()
			continue
		case <-l.closeCh:
			closing = true
		}
		if closing {
			l.finish()
			return
		}
		// One round: Sync waits for a round that started after it was
		// called, which makes it a barrier for deletions too.
		round := l.roundStarted.Add(1)
		if l.syncWaiters.Load() > 0 || l.unsyncedOver() || tick {
			l.syncNow()
		} else {
			l.sealPending()
		}
		l.prepareAhead()
		l.housekeep(time.Now())
		cursors := *l.cursorList.Load()
		for _, c := range cursors {
			if tick {
				c.syncAcks()
				// A floor an error stopped (a failed bitmap read) moves
				// here: no later Ack lands on a record already acknowledged.
				c.readMu.Lock()
				c.advanceFloorLocked(nil)
				c.readMu.Unlock()
			}
			if tick || time.Since(c.persistedAt) >= cursorInterval {
				c.persist()
			}
		}
		l.roundDone.Store(round)
		l.synced.Notify()
	}
}

// unsyncedOver reports whether the sync policy wants an fsync now.
func (l *Log) unsyncedOver() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unsynced >= l.opts.SyncEvery
}

// syncNow makes every record appended so far durable: it seals the
// segments rotated out, fsyncs the directory if segments were created, and
// fsyncs the active log; then it releases the Puts and Syncs waiting for
// those records. Puts that arrive meanwhile wait for the next round, so
// concurrent Puts share one fsync (group commit).
func (l *Log) syncNow() {
	if l.syncAlways {
		// The Puts just released by the last fsync are about to put
		// again; let them, so the next fsync serves them all rather than
		// the first to wake (group commit's convoy).
		runtime.Gosched()
	}
	l.mu.Lock()
	target := l.nextSeq.Load()
	active := l.t
	pend := l.sealQ
	l.sealQ = nil
	dirty := l.unsynced > 0
	dirDirty := l.dirDirty
	l.unsynced, l.dirDirty = 0, false
	failed := l.writeErr
	l.mu.Unlock()
	// Segments rotated out after this point wait for the next round, so
	// active's handles stay open until then.
	err := l.sealAll(pend)
	if failed != nil {
		return
	}
	if err == nil && dirDirty && !l.opts.NoSync {
		if err = l.fs.SyncDir(l.dir); err != nil {
			err = fmt.Errorf("diskqueue: fsync directory %s: %w", l.dir, err)
		}
	}
	if err == nil && dirty && !l.opts.NoSync {
		start := time.Now()
		if err = active.log.f.Sync(); err != nil {
			err = fmt.Errorf("diskqueue: fsync %s: %w", active.seg.path(logSuffix), err)
		} else {
			l.syncLatency.Record(time.Since(start))
			l.syncs.Add(1)
		}
	}
	if err != nil {
		l.fail(err)
	} else if target > l.syncedSeq.Load() {
		l.syncedSeq.Store(target)
	}
}

// sealPending seals the segments rotated out since the last call.
func (l *Log) sealPending() error {
	l.mu.Lock()
	pend := l.sealQ
	l.sealQ = nil
	l.mu.Unlock()
	return l.sealAll(pend)
}

// sealAll seals segments rotated out, oldest first. Only the writer
// goroutine seals, so a tail's handles stay open until it does.
func (l *Log) sealAll(pend []*tail) error {
	var first error
	for _, t := range pend {
		start := time.Now()
		if err := l.seal(t); err != nil {
			l.fail(err)
			if first == nil {
				first = err
			}
			continue
		}
		if !l.opts.NoSync {
			l.syncLatency.Record(time.Since(start))
			l.syncs.Add(1)
		}
	}
	return first
}

// prepareAhead preallocates the active segment's next log chunk and asks
// the kernel to fault its pages in, so producers rarely make the
// fallocate call themselves and never stop for a page fault. A failure
// here is left for the Put that needs the space to report.
func (l *Log) prepareAhead() {
	l.mu.Lock()
	t := l.t
	if t == nil || !t.mapped {
		l.mu.Unlock()
		return
	}
	// Stay a chunk ahead, but not past what the segment can hold.
	if want := min(t.size+logChunk, l.opts.MaxSegmentBytes); want > t.log.alloc {
		t.log.ensure(want)
	}
	from, to := t.log.prefaulted, t.log.alloc
	t.log.prefaulted = to
	m := t.log.m
	l.mu.Unlock()
	// Only the writer goroutine unmaps (in seal), so m stays valid here.
	if to > from {
		prefault(m[from:to])
	}
}

// fail records a write or fsync error as sticky: after it, Put and Sync
// return it forever. A failed fsync is never retried, because the kernel may
// already have dropped the dirty pages it could not write.
func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

func (l *Log) failLocked(err error) {
	if l.writeErr == nil {
		l.writeErr = err
		l.logger.Error("diskqueue: write failed; the queue accepts no more records", "err", err)
	}
	if l.failErr.Load() == nil {
		l.failErr.Store(&err)
	}
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// housekeep deletes segments every record of which is acknowledged, except
// those retention keeps, and rolls a fully consumed active segment when the
// disk budget asks for it.
func (l *Log) housekeep(now time.Time) {
	cursors := *l.cursorList.Load()
	if l.rollRequested.Load() {
		l.rollRequested.Store(false)
		l.mu.Lock()
		if t := l.t; l.consumedLocked() && t.end > t.seg.base && l.writeErr == nil {
			err := l.rotateLocked()
			if errors.Is(err, ErrDiskFull) {
				// No room even for the next segment's first pages: the
				// active one holds nothing unacknowledged, so it goes first.
				err = l.recycleActiveLocked()
			}
			if err != nil && !errors.Is(err, ErrDiskFull) {
				l.failLocked(err)
			}
		}
		l.mu.Unlock()
		l.sealPending()
	}
	if len(cursors) == 0 {
		return // no consumer yet: the log holds everything for the first
	}
	l.segMu.RLock()
	segs := l.segs
	l.segMu.RUnlock()
	// Candidates: sealed segments (never the last) every record of which
	// every cursor has acknowledged, whether its floor has passed them or
	// an older segment still holds records it has not.
	isDone := make([]bool, len(segs))
	for i := range isDone {
		isDone[i] = !segs[i].writing.Load()
	}
	for _, c := range cursors {
		for i, d := range c.done(segs) {
			isDone[i] = isDone[i] && d
		}
	}
	var cands []int
	for i := 0; i < len(segs)-1; i++ {
		if !segs[i].gone.Load() && isDone[i] {
			cands = append(cands, i)
		}
	}
	// Keep the newest that retention allows, and delete the rest oldest
	// first.
	keep := len(cands) // cands[keep:] are kept
	var kept int64
	retain := l.opts.RetainBytes > 0 || l.opts.RetainAge > 0
	for k := len(cands) - 1; retain && k >= 0; k-- {
		s := segs[cands[k]]
		b := s.diskBytes()
		if l.opts.RetainBytes > 0 && kept+b > l.opts.RetainBytes {
			break
		}
		if l.opts.RetainAge > 0 && now.Sub(time.Unix(0, l.segMaxTime(s))) > l.opts.RetainAge {
			break
		}
		kept += b
		keep = k
	}
	// The disk budget outranks retention.
	if max := l.opts.MaxDiskBytes; max > 0 {
		var freed int64
		for k := 0; k < len(cands); k++ {
			if k < keep {
				freed += segs[cands[k]].diskBytes()
				continue
			}
			if l.diskBytes.Load()-freed <= max {
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
	// Store the cursors first so that, after a crash, none points into a
	// segment that no longer exists (Open would cope, but this is cheaper).
	for _, c := range cursors {
		c.persist()
	}
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
	l.dropSegments(prefix)
	for _, i := range cands[:keep] {
		if i >= prefix {
			l.ghostSegment(segs[i])
		}
	}
	l.freed.Notify()
}

// dropSegments takes the first n segments out of the list and deletes
// their files (or tombstones). Only the writer goroutine drops segments.
func (l *Log) dropSegments(n int) {
	if n == 0 {
		return
	}
	l.segMu.Lock()
	old := slices.Clone(l.segs[:n])
	l.segs = slices.Clone(l.segs[n:])
	for _, s := range old {
		l.diskBytes.Add(-s.diskBytes())
	}
	l.segMu.Unlock()
	for _, s := range old {
		if s.gone.Load() {
			l.removeTombstone(s.base)
		} else {
			l.removeSegment(s)
		}
	}
}

// recycleActiveLocked makes room to roll an active segment every record of
// which is acknowledged, on a file system too full to create the next
// segment beside it: it frees the old records' blocks (a hole punched in
// the log; its size and offsets stay, and the segment is deleted once
// sealed), then rolls. Retained segments are not punched: retention keeps
// them for replay. The caller holds l.mu and is the writer goroutine.
func (l *Log) recycleActiveLocked() error {
	t := l.t
	p, ok := t.log.f.(puncher)
	if !ok || l.opts.RetainBytes > 0 || l.opts.RetainAge > 0 {
		return fmt.Errorf("%w: cannot free the consumed active segment in place", ErrDiskFull)
	}
	if err := p.PunchHole(fileHeaderSize, t.size-fileHeaderSize); err != nil {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	// Its records are gone now: nothing may be appended behind the hole,
	// so until the roll succeeds every Put rolls first (or reports the
	// disk full).
	t.punched = true
	l.logger.Warn("diskqueue: file system full; freed the consumed active segment's blocks to roll it", "segment", t.seg.base, "bytes", t.size)
	return l.rotateLocked()
}

// ghostSegment deletes a fully acknowledged segment that older
// unacknowledged records keep from leaving the list: NNNN.ack in the log's
// directory becomes a tombstone first (it is the Queue's own cursor's
// bitmap, if the log has that cursor), so a crash in between leaves a
// tombstone beside the log (Open finishes the deletion), never a gap taken
// for loss.
func (l *Log) ghostSegment(s *segment) {
	cursors := *l.cursorList.Load()
	for _, c := range cursors {
		c.closeBitmap(s)
	}
	l.segMu.Lock()
	before := s.diskBytes()
	s.gone.Store(true)
	l.diskBytes.Add(s.diskBytes() - before)
	l.segMu.Unlock()
	if err := l.writeTombstone(s); err != nil {
		l.logger.Warn("diskqueue: cannot mark an acknowledged segment deleted; keeping it", "segment", s.base, "err", err)
		l.segMu.Lock()
		s.gone.Store(false)
		l.diskBytes.Add(before - ackHeaderSize)
		l.segMu.Unlock()
		return
	}
	s.closeFiles()
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := l.fs.Remove(s.path(suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.logger.Warn("diskqueue: cannot remove an acknowledged segment", "segment", s.base, "err", err)
		}
	}
	l.removeNamedBitmaps(s, cursors)
}

// removeSegment deletes the files of a segment already dropped from l.segs.
// A failure is logged: the files stay and are cleaned up at the next Open.
func (l *Log) removeSegment(s *segment) {
	s.closeFiles()
	cursors := *l.cursorList.Load()
	for _, c := range cursors {
		c.forget(s)
	}
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, ackSuffix} {
		if i == 1 {
			l.crashPoint("retention-delete") // the log is gone, its indexes not yet
		}
		if err := l.fs.Remove(s.path(suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.logger.Warn("diskqueue: cannot remove consumed segment", "segment", s.base, "err", err)
		}
	}
	l.removeNamedBitmaps(s, cursors)
}

// removeNamedBitmaps deletes the named cursors' acknowledgement files of a
// deleted segment (the Queue's own cursor's is NNNN.ack beside the log,
// which the caller handles). One left by a crash is removed when its
// cursor is next opened.
func (l *Log) removeNamedBitmaps(s *segment, cursors []*Cursor) {
	for _, c := range cursors {
		if c.name == "" {
			continue
		}
		if err := l.fs.Remove(c.ackPath(s)); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.logger.Warn("diskqueue: cannot remove the acknowledgement file of a deleted segment", "segment", s.base, "err", err)
		}
	}
}

// finish runs when the writer exits: everything put is synced (unless
// NoSync), the active segment is cut to what was written and the cursor
// stored.
func (l *Log) finish() {
	l.roundStarted.Add(1)
	l.syncNow()
	cursors := *l.cursorList.Load()
	for _, c := range cursors {
		c.syncAcks()
	}
	l.mu.Lock()
	t := l.t
	l.t = nil
	l.mu.Unlock()
	if t != nil {
		if err := l.seal(t); err != nil {
			l.fail(err)
		}
		// The last segment stays the one the next Open appends to.
		t.seg.sealed.Store(false)
	}
	for _, c := range cursors {
		c.persist()
		if c.persistErr != nil && l.w.closeErr == nil {
			l.w.closeErr = c.persistErr
		}
	}
	l.roundDone.Store(l.roundStarted.Load())
	l.synced.Notify()
	if err := l.failErr.Load(); err != nil && l.w.closeErr == nil {
		l.w.closeErr = *err
	}
}

// empty carries out Empty: it rolls to a new segment, moves every cursor
// to its start and deletes every older segment.
func (l *Log) empty() error {
	l.mu.Lock()
	if err := l.writeErr; err != nil {
		l.mu.Unlock()
		return err
	}
	if t := l.t; t.end > t.seg.base {
		if err := l.rotateLocked(); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	t := l.t
	cursors := slices.Clone(l.cursors)
	for _, c := range cursors {
		c.readMu.Lock()
		c.rd.reset(t.seg, t.size, t.end)
		c.ackFloor.Store(t.end)
		c.ackedAbove.Store(0)
		c.inFlight.Store(0)
		c.readMu.Unlock()
	}
	l.mu.Unlock()
	if l.opts.emptyHookForTesting != nil {
		l.opts.emptyHookForTesting() // producers may append and roll from here on
	}
	if err := l.sealPending(); err != nil {
		return err
	}
	for _, c := range cursors {
		c.persist()
	}
	// Producers may have rotated past t.seg meanwhile: only what came
	// before it goes.
	l.segMu.RLock()
	idx := slices.Index(l.segs, t.seg)
	l.segMu.RUnlock()
	l.dropSegments(idx)
	l.freed.Notify()
	return nil
}

// crashPoint gives the crash test a chance to die at a named moment (the
// names are listed in export_test.go).
func (l *Log) crashPoint(name string) {
	if l.opts.crashPointForTesting != nil {
		l.opts.crashPointForTesting(name)
	}
}
