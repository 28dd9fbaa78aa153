package diskqueue

import (
	"cmp"
	"errors"
	"os"
	"slices"
	"sync/atomic"
)

// A cursor keeps open the bitmaps it is using and closes the others, so a
// long retained log does not hold a descriptor and a mapping per segment
// per cursor; a closed bitmap is opened again on use (ackFor). Which ones
// it needs is the cursor's business (bitmapNeeded); the bookkeeping of
// what is open, and of the files closed owing an fsync, is bitmapCache's.

// maxOpenBitmaps is how many of a cursor's acknowledgement files may be
// open before closeFarBitmaps looks for those it can close: of sealed
// segments away from the read position with no record in flight. Those
// of segments being written, at the read position or with records in
// flight stay open beyond it.
const maxOpenBitmaps = 32

// bitmapCache is the list of a cursor's open bitmaps and of the files it
// has closed, or is to close, owing an fsync. Guarded by the cursor's
// readMu, except newFiles.
type bitmapCache struct {
	limit  int  // bitmaps open before sweep looks for some to close
	noSync bool // nothing is fsynced: a bitmap is closed at once
	// memOnly says the bitmaps are copies in memory (a read-only view's):
	// never closed, so never listed.
	memOnly bool

	// open are the states whose bitmap may be open (sweep keeps it to
	// those needed); sweepAt is the length past which it looks next.
	open    []*segAcks
	sweepAt int
	// syncing is set while syncAcks fsyncs files it took from the
	// cursor's states outside readMu: a bitmap closed meanwhile goes to
	// retired, so its fsync is still done, before the close.
	syncing bool
	// passed are segments the floor passed while they were still being
	// sealed, whose bitmaps retryPassed retires once they are.
	passed []*segAcks
	// retired are bitmap files of segments the floor has passed, waiting
	// for the writer goroutine to fsync and close them (retirePassed).
	retired []file
	// newFiles says bitmap files were created (or renamed into place) in
	// the cursor's directory since syncAcks last fsynced it: until then a
	// power cut may lose their names, and so the acknowledgements in them.
	newFiles atomic.Bool
}

func newBitmapCache(opts *Options, readOnly bool) bitmapCache {
	limit := maxOpenBitmaps
	if n := opts.openBitmapsForTesting; n > 0 {
		limit = n
	}
	return bitmapCache{limit: limit, noSync: opts.NoSync, memOnly: readOnly}
}

// list adds sa, whose bitmap is open or about to be, to the open ones. It
// reports whether the list has just grown past where sweep should look:
// then the writer goroutine's round should sweep (a rotation lists the
// new segment's state under the log's mu, which should not wait for
// closes).
func (b *bitmapCache) list(sa *segAcks) (sweepDue bool) {
	if sa.listed || b.memOnly {
		return false
	}
	sa.listed = true
	b.open = append(b.open, sa)
	return len(b.open) == b.sweepLimit()+1
}

func (b *bitmapCache) sweepLimit() int { return max(b.limit, b.sweepAt) }

// sweepDue reports whether more than sweepLimit bitmaps are listed.
func (b *bitmapCache) sweepDue() bool { return len(b.open) > b.sweepLimit() }

// sweep takes out of the list the states whose bitmap is closed or that
// are no longer current (their segment left the log), keeps those needed,
// and shelves the others. Those kept are looked at again once the bound's
// worth more are listed, so a cursor with many segments in flight walks
// them once per that many opens, not each round.
func (b *bitmapCache) sweep(current, needed func(*segAcks) bool) {
	kept := b.open[:0]
	for _, sa := range b.open {
		switch {
		case sa.ack == nil || !current(sa):
			sa.listed = false // closed, or the segment left the log
		case needed(sa):
			kept = append(kept, sa)
		default:
			b.shelve(sa)
			sa.listed = false
		}
	}
	clear(b.open[len(kept):])
	b.open = kept
	b.sweepAt = len(kept) + b.limit
}

// retire closes the bitmap of a segment the cursor's floor has passed:
// nothing in it changes again. One with bits not yet fsynced goes to the
// writer goroutine (retirePassed), which fsyncs and then closes it, so a
// power cut loses no more than it would have. A segment still being
// written or sealed keeps its file (the writer cuts it to size) until
// retryPassed finds it sealed.
func (b *bitmapCache) retire(sa *segAcks) {
	if sa == nil || sa.ack == nil || sa.ack.mem {
		return
	}
	if sa.seg.writing.Load() {
		// Listed once: a consumer that keeps up brings the floor to the
		// end of the segment being written at every Ack, and the list
		// grew by one each time (and took every writer round longer),
		// until the segment was sealed.
		if !sa.passed {
			sa.passed = true
			b.passed = append(b.passed, sa)
		}
		return
	}
	b.shelve(sa)
}

// retryPassed retires the bitmaps of segments the floor passed while they
// were being sealed (passed, not a walk of every segment); those still
// being sealed go back on the list.
func (b *bitmapCache) retryPassed() {
	passed := b.passed
	b.passed = nil
	for _, sa := range passed {
		sa.passed = false
		b.retire(sa)
	}
}

// shelve closes sa's bitmap, or leaves it to the writer goroutine to fsync
// and close (retired) if bits set since the last fsync may not be durable
// yet: it is dirty, or syncAcks is fsyncing it now.
func (b *bitmapCache) shelve(sa *segAcks) {
	a := sa.ack
	sa.ack = nil
	a.release()
	if (a.dirty || b.syncing) && !b.noSync {
		b.retired = append(b.retired, a.f)
		return
	}
	a.f.Close()
}

// takeRetired hands over the files waiting to be fsynced and closed.
func (b *bitmapCache) takeRetired() []file {
	r := b.retired
	b.retired = nil
	return r
}

// installLocked makes a the cursor's open bitmap of sa's segment, and lists
// it among the open ones. The caller holds c.readMu.
func (c *Cursor) installLocked(sa *segAcks, a *ackFile) {
	a.owner = c
	sa.ack = a
	if c.list(sa) {
		c.log.wake()
	}
}

// closeFarBitmapsLocked closes the bitmaps the cursor does not need open
// (bitmapNeeded) once more than sweepLimit are listed; their bits are in
// the files, and ackFor opens them again on use. One owing an fsync goes
// to retired, as the floor's passing would send it (shelve). The writer
// goroutine runs it each round (retirePassed), and ackFor before it opens
// another, so a reader, an Unacknowledged or Open's count (loadAcks)
// walking many segments between two rounds does not open them all. The
// caller holds c.readMu and uses no bitmap it had before the call.
func (c *Cursor) closeFarBitmapsLocked() {
	if !c.sweepDue() {
		return
	}
	floor, next := c.ackFloor.Load(), c.rd.seq
	at := c.log.segmentAt(next)
	var after *segment
	if at != nil {
		after = c.log.segmentAfter(at)
	}
	c.sweep(
		func(sa *segAcks) bool { return c.segs[sa.seg] == sa },
		func(sa *segAcks) bool { return c.bitmapNeeded(sa, floor, next, at, after) })
}

// bitmapNeeded reports whether the cursor keeps sa's bitmap open: its
// segment is being written or sealed (appends grow the file and the seal
// cuts it), the reader is in it or about to enter it (at, after: the
// segment of next, the next record Read hands out, and the one after), the
// last Read or Ack used it, or it may hold records in flight. Those lie
// in [floor, next): a segment past next, or every record of which is
// acknowledged, holds none. A read-only view's bitmaps, in memory only,
// are never closed (nor listed).
func (c *Cursor) bitmapNeeded(sa *segAcks, floor, next uint64, at, after *segment) bool {
	seg := sa.seg
	switch {
	case sa.ack.mem || !seg.sealed.Load() || seg.writing.Load():
		return true
	case seg == c.rd.seg || seg == at || seg == after || sa == c.lastRead || sa == c.lastAcked:
		return true
	}
	end := seg.endNow()
	return seg.base < next && end > floor && sa.acked < int64(end-seg.base)
}

// retirePassed retires the bitmaps of segments the floor has passed that
// were still being sealed when it did (c.passed, not a walk of every
// segment), closes those far from the read position
// (closeFarBitmapsLocked), then fsyncs and closes every retired file
// (their directory first, if bitmaps were made in it since it last was).
// The writer goroutine calls it each round.
func (c *Cursor) retirePassed() {
	c.readMu.Lock()
	c.retryPassed()
	c.closeFarBitmapsLocked()
	retired := c.takeRetired()
	c.readMu.Unlock()
	// The names first, as syncAcks does: a bitmap made since the last
	// syncAcks is not in the directory on disk yet.
	if len(retired) > 0 && c.newFiles.Swap(false) {
		if err := c.log.fs.SyncDir(c.dir); err != nil {
			c.newFiles.Store(true) // try again next time
			c.logger.Warn("diskqueue: cannot fsync the directory of new acknowledgement files; after a power cut finished records may be delivered again", "err", err)
		}
	}
	for _, f := range retired {
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			c.logger.Warn("diskqueue: cannot fsync acknowledgements; after a power cut finished records may be delivered again", "err", err)
		}
		f.Close()
	}
}

// closeBitmap closes the cursor's acknowledgement file of seg, keeping
// what it counted.
func (c *Cursor) closeBitmap(seg *segment) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.leaveLocked(seg)
	c.closeAck(seg)
}

// syncAcks fsyncs the acknowledgement files changed since the last call,
// so a power cut loses at most the acknowledgements of one SyncInterval.
// Under the default policy that is the same bound as for the records.
// First it closes the bitmaps the cursor no longer needs open, whatever
// sweepAt says.
func (c *Cursor) syncAcks() {
	c.readMu.Lock()
	if len(c.open) > c.limit {
		// Bitmaps kept for records in flight that have all been
		// acknowledged since are closed here, at the latest, when no
		// other bitmap opened since (sweepAt) has had the list looked at.
		c.sweepAt = 0
		c.closeFarBitmapsLocked()
	}
	c.readMu.Unlock()
	if c.log.opts.NoSync || c.log.readOnly {
		return
	}
	type dirty struct {
		base uint64
		f    file
	}
	var todo []dirty
	c.readMu.Lock()
	for seg, sa := range c.segs {
		if a := sa.ack; a != nil && a.dirty && !a.mem {
			a.dirty = false
			todo = append(todo, dirty{seg.base, a.f})
		}
	}
	c.syncing = len(todo) > 0
	c.readMu.Unlock()
	defer func() {
		c.readMu.Lock()
		c.syncing = false
		c.readMu.Unlock()
	}()
	// Oldest first. Open does not depend on the order (the kernel writes
	// mapped pages back in its own): see wasRead.
	slices.SortFunc(todo, func(a, b dirty) int { return cmp.Compare(a.base, b.base) })
	files := make([]file, len(todo))
	for i, d := range todo {
		files[i] = d.f
	}
	// The names first: a bitmap's fsync then makes it durable whole.
	if c.newFiles.Swap(false) {
		if err := c.log.fs.SyncDir(c.dir); err != nil {
			c.newFiles.Store(true) // try again next time
			c.logger.Warn("diskqueue: cannot fsync the directory of new acknowledgement files; after a power cut finished records may be delivered again", "err", err)
		}
	}
	for _, f := range files {
		// A segment deleted meanwhile has closed its file: nothing to keep.
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			c.logger.Warn("diskqueue: cannot fsync acknowledgements; after a power cut finished records may be delivered again", "err", err)
		}
	}
}
