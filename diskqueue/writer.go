package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// cursorInterval is the least time between two stores of a moved read
// cursor outside the sync tick: it bounds how many acknowledged records a
// crash delivers again, at the cost of at most ten cursor fsyncs a second.
const cursorInterval = 100 * time.Millisecond

// fullRetryInterval is how often a Put waiting (BlockWhenFull) on a full
// file system tries again when nothing this queue did freed space: another
// process may have.
const fullRetryInterval = 100 * time.Millisecond

// writer is the state of the writer goroutine. Producers append records
// themselves (put.go); the writer goroutine does what should not hold them
// up: fsyncs by the sync policy (group commit for SyncEvery 1), sealing
// rotated segments, making the spare segment, storing the read cursor and
// deleting consumed segments; the preparer goroutine (prepare)
// preallocates and pre-faults ahead of the appends. Nothing else touches
// these fields once Open returns.
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
			// Release the Puts this fsync covered now, not after the
			// round's housekeeping: with SyncEvery 1 they put again
			// meanwhile, and the next fsync serves them all. A Sync
			// waiting for the round's end checks again then.
			l.synced.Notify()
		} else {
			l.sealPending()
		}
		l.prepareSpare()
		l.housekeep(time.Now())
		cursors := *l.cursorList.Load()
		for _, c := range cursors {
			c.retirePassed()
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
// syncs the active log as far as those records reach (on the mapped path
// that range alone, region.sync); then it releases the Puts and Syncs
// waiting for them. Puts that arrive meanwhile wait for the next round, so
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
	var size int64 // what target's records of active span
	if active != nil {
		size = active.size
		l.flushLocked(active) // for retention, after this
	}
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
		// Even while a pre-fault is under way (the preparer holds prepMu
		// for milliseconds): writeback meeting the filled pages still
		// mapped write-protects each with a TLB shootdown, an interrupt
		// of the producer's CPU, and the sync skipped this when it could
		// not take prepMu (about 5% of all CPU over 4 M Puts of 100 B went
		// to the shootdowns).
		l.dropMu.Lock()
		active.log.dropWritten(size)
		l.dropMu.Unlock()
		if err = active.log.sync(size); err != nil {
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

// sealPending seals the segments rotated out since the last call, and
// brings the disk usage up to date as syncNow does.
func (l *Log) sealPending() error {
	l.mu.Lock()
	if l.t != nil {
		l.flushLocked(l.t) // for retention, after this
	}
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

// prepare is the preparer goroutine: woken by appends (reserve), it keeps
// the active segment's log preallocated and pre-faulted ahead of the
// records (prepareAhead). It is not the writer goroutine because an fsync
// there can take tens of milliseconds on a busy disk, in which a producer
// writes tens of megabytes: past what was pre-faulted, it would stop for a
// page fault on every 4 KiB.
func (l *Log) prepare() {
	defer close(l.prepDone)
	// It also ticks the record clock (clock.go), stopped while no Put
	// reads it.
	tick := time.NewTimer(clockPeriod)
	tick.Stop()
	defer tick.Stop()
	for {
		select {
		case <-l.prepCh:
			l.prepareAhead()
		case <-tick.C:
			if l.clock.advance() {
				tick.Reset(clockPeriod)
			}
		case <-l.clock.wake:
			tick.Reset(clockPeriod)
		case <-l.closeCh:
			return
		}
	}
}

// wakePreparer tells the preparer goroutine there is work, without blocking.
func (l *Log) wakePreparer() {
	select {
	case l.prepCh <- struct{}{}:
	default:
	}
}

// prepareAhead preallocates the active segment's next log chunk and asks
// the kernel to fault its pages in, so producers rarely make the
// fallocate call themselves and never stop for a page fault, and takes
// the pages the records have filled out of the mapping (dropWritten).
// A failure here is left for the Put that needs the space to report.
func (l *Log) prepareAhead() {
	// Held across the unlocked part: the writer goroutine seals (unmaps) a
	// segment rotated out meanwhile only once it is released.
	l.prepMu.Lock()
	defer l.prepMu.Unlock()
	l.mu.Lock()
	t := l.t
	if t == nil || !t.mapped {
		l.mu.Unlock()
		return
	}
	// Stay a chunk ahead, but not past what the segment can hold. ensure
	// grows by a chunk, so starting within a chunk of the end keeps the
	// log one to two chunks ahead: with one to one and a half, a
	// preparer kept off the CPU for a few milliseconds let the producer
	// overtake its pre-faulting (2 to 3 times the producer's page faults
	// over 4 M Puts of 100 B, on the loaded 2-core machine).
	if want := min(t.size+logChunk, l.opts.MaxSegmentBytes); want > t.log.alloc && t.log.alloc-t.size < logChunk {
		t.log.ensure(want)
	}
	// The index as far ahead as it has grown (up to a chunk), so appends
	// seldom grow it themselves, each time writing at once into a page
	// not pre-faulted yet (a quarter of the index's pages took a fault in
	// the producer); a small queue's index still starts small.
	if ahead := min(indexChunk, max(allocUnit, t.indexSize)); t.index.alloc-t.indexSize < ahead/2 {
		t.index.ensure(min(t.indexSize+ahead, int64(len(t.index.m))))
	}
	// What the records have passed needs no pre-faulting any more, and
	// records written with pwrite (bigFrame) none at all: the kernel
	// fills the page cache for them, and pre-faulting would only take CPU
	// from the producer (1 KiB Puts were 15% slower with it).
	from, to := max(t.log.prefaulted, t.size&^int64(pageSize-1)), t.log.alloc
	if !t.copied {
		from = to
	}
	t.copied = false
	t.log.prefaulted = to
	m := t.log.m
	size := t.size
	// The index as far as appends have preallocated it (a page per 1024
	// records).
	ifrom, ito := max(t.index.prefaulted, t.indexSize&^int64(pageSize-1)), t.index.alloc
	t.index.prefaulted = max(t.index.prefaulted, ito)
	im := t.index.m
	l.mu.Unlock()
	// The index first: a few pages, each written by every Put for a while.
	if ito > ifrom {
		prefault(im[ifrom:ito])
	}
	if to > from {
		prefault(m[from:to])
	}
	// Whatever the sync policy, the kernel's own writeback would otherwise
	// meet the written pages still mapped.
	l.dropMu.Lock()
	t.log.dropWritten(size)
	l.dropMu.Unlock()
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
	if t != nil {
		l.flushLocked(t)
	}
	l.t = nil
	l.dropSpareLocked()
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

// crashPoint gives the crash test a chance to die at a named moment (the
// names are listed in export_test.go).
func (l *Log) crashPoint(name string) {
	if l.opts.crashPointForTesting != nil {
		l.opts.crashPointForTesting(name)
	}
}

// request is work for the writer goroutine, done between its rounds, so it
// never races a seal, a deletion or a cursor store.
type request struct {
	fn    func() error
	reply chan error
}

// request runs fn on the writer goroutine and returns its error.
func (l *Log) request(fn func() error) error {
	return l.requestCtx(context.Background(), fn)
}

// requestCtx is request that gives up when ctx ends, returning its error;
// fn may still run after that, in the writer's turn.
func (l *Log) requestCtx(ctx context.Context, fn func() error) error {
	r := request{fn: fn, reply: make(chan error, 1)}
	select {
	case l.reqCh <- r:
	case <-l.closeCh:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.reply:
		return err
	case <-l.writerCh:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitSynced waits until every record below want is on stable storage, or
// a sticky error says it never will be. With round set it also waits for
// a writer round that started after round was read.
func (l *Log) waitSynced(ctx context.Context, want uint64, round uint64, barrier bool) error {
	l.syncWaiters.Add(1)
	defer l.syncWaiters.Add(-1)
	l.wake()
	done := func() bool {
		return l.syncedSeq.Load() >= want && (!barrier || l.roundDone.Load() > round)
	}
	for {
		ch := l.synced.Wait()
		if done() {
			return nil
		}
		if err := l.failErr.Load(); err != nil {
			return *err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for fsync: %w", ctx.Err())
		case <-l.writerCh:
			// Closed: the writer's last round has run.
			if l.syncedSeq.Load() >= want {
				return nil
			}
			if err := l.failErr.Load(); err != nil {
				return *err
			}
			return ErrClosed
		}
	}
}

// wake tells the writer there is work, without blocking.
func (l *Log) wake() {
	select {
	case l.wakeCh <- struct{}{}:
	default:
	}
}

// Sync waits until every record put before the call is on stable storage
// (with NoSync: in the kernel, where every record a Put returned for
// already is) and the writer goroutine has done one round of housekeeping:
// segments acknowledged before the call are deleted when it returns.
func (l *Log) Sync(ctx context.Context) error {
	if l.readOnly {
		return ErrReadOnly
	}
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	want := l.nextSeq.Load()
	l.mu.Unlock()
	if err := l.waitSynced(ctx, want, l.roundStarted.Load(), true); err != nil {
		return fmt.Errorf("diskqueue: sync: %w", err)
	}
	return nil
}
