package diskqueue

import (
	"cmp"
	"errors"
	"os"
	"slices"
)

// installLocked makes a the cursor's open bitmap of sa's segment, and lists
// sa among the open ones (track). The caller holds c.readMu.
func (c *Cursor) installLocked(sa *segAcks, a *ackFile) {
	a.owner = c
	sa.ack = a
	c.track(sa)
}

// maxOpenBitmaps is how many of a cursor's acknowledgement files may be
// open before closeFarBitmaps looks for those it can close: of sealed
// segments away from the read position with no record in flight. Those
// of segments being written, at the read position or with records in
// flight stay open beyond it.
const maxOpenBitmaps = 32

// track lists sa, whose bitmap is open or about to be. A list grown past
// where closeFarBitmaps should look wakes the writer goroutine, whose
// round does: a rotation lists the new segment's state under the log's
// mu, which should not wait for closes. A read-only view's bitmaps are
// copies in memory, never closed, so they are not listed. The caller
// holds c.readMu.
func (c *Cursor) track(sa *segAcks) {
	if sa.listed || c.log.readOnly {
		return
	}
	sa.listed = true
	c.open = append(c.open, sa)
	if len(c.open) == c.sweepLimit()+1 {
		c.log.wake()
	}
}

func (c *Cursor) sweepLimit() int { return max(c.openLimit(), c.sweepAt) }

func (c *Cursor) openLimit() int {
	if n := c.log.opts.openBitmapsForTesting; n > 0 {
		return n
	}
	return maxOpenBitmaps
}

// closeFarBitmapsLocked closes the bitmaps the cursor does not need open
// (bitmapNeeded) once more than sweepLimit are listed; their bits are in
// the files, and ackFor opens them again on use. One owing an fsync goes
// to retired, as the floor's passing would send it (shelve). The writer
// goroutine runs it each round (retirePassed), and ackFor before it opens
// another, so a reader, an Unacknowledged or Open's count (loadAcks)
// walking many segments between two rounds does not open them all. The caller holds c.readMu and uses
// no bitmap it had before the call.
func (c *Cursor) closeFarBitmapsLocked() {
	if len(c.open) <= c.sweepLimit() {
		return
	}
	floor, next := c.ackFloor.Load(), c.rd.seq
	at := c.log.segmentAt(next)
	var after *segment
	if at != nil {
		after = c.log.segmentAfter(at)
	}
	kept := c.open[:0]
	for _, sa := range c.open {
		switch {
		case sa.ack == nil || c.segs[sa.seg] != sa:
			sa.listed = false // closed, or the segment left the log
		case c.bitmapNeeded(sa, floor, next, at, after):
			kept = append(kept, sa)
		default:
			c.shelve(sa)
			sa.listed = false
		}
	}
	clear(c.open[len(kept):])
	c.open = kept
	// Those kept are looked at again once the bound's worth more are
	// listed, so a cursor with many segments in flight walks them once
	// per that many opens, not each round.
	c.sweepAt = len(kept) + c.openLimit()
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

// retire closes the cursor's bitmap of a segment its floor has passed:
// nothing in it changes again, so a long retained log does not hold a
// descriptor and a mapping per segment per cursor. One with bits not yet
// fsynced goes to the writer goroutine (retirePassed), which fsyncs and
// then closes it, so a power
// cut loses no more than it would have. A segment still being written or
// sealed keeps its file (the writer cuts it to size). The caller holds
// c.readMu.
func (c *Cursor) retire(sa *segAcks) {
	if sa == nil || sa.ack == nil || sa.ack.mem {
		return
	}
	if sa.seg.writing.Load() {
		// For retirePassed, once sealed; once: a consumer that keeps up
		// brings the floor to the end of the segment being written at
		// every Ack, and the list grew by one each time (and took
		// every writer round longer), until the segment was sealed.
		if !sa.passed {
			sa.passed = true
			c.passed = append(c.passed, sa)
		}
		return
	}
	c.shelve(sa)
}

// shelve closes sa's bitmap, or hands it to the writer goroutine to fsync
// and close (retired) if bits set since the last fsync may not be durable
// yet: it is dirty, or syncAcks is fsyncing it now. The caller holds
// c.readMu.
func (c *Cursor) shelve(sa *segAcks) {
	a := sa.ack
	sa.ack = nil
	a.release()
	if (a.dirty || c.syncing) && !c.log.opts.NoSync {
		c.retired = append(c.retired, a.f)
		return
	}
	a.f.Close()
}

// retirePassed retires the bitmaps of segments the floor has passed that
// were still being sealed when it did (c.passed, not a walk of every
// segment), closes those far from the read position
// (closeFarBitmapsLocked), then fsyncs and closes every retired file
// (their directory first, if bitmaps were made in it since it last was).
// The writer goroutine calls it each round.
func (c *Cursor) retirePassed() {
	c.readMu.Lock()
	passed := c.passed
	c.passed = nil
	for _, sa := range passed {
		sa.passed = false
		c.retire(sa) // those still being sealed go back on the list
	}
	c.closeFarBitmapsLocked()
	retired := c.retired
	c.retired = nil
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
	if sa := c.segs[seg]; sa != nil && sa.ack != nil {
		sa.ack.close()
		sa.ack = nil
	}
}

// syncAcks fsyncs the acknowledgement files changed since the last call,
// so a power cut loses at most the acknowledgements of one SyncInterval.
// Under the default policy that is the same bound as for the records.
// First it closes the bitmaps the cursor no longer needs open, whatever
// sweepAt says.
func (c *Cursor) syncAcks() {
	c.readMu.Lock()
	if len(c.open) > c.openLimit() {
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
