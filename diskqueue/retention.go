package diskqueue

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Retention: which segments leave the disk and how. The writer goroutine
// deletes a sealed segment once every cursor has acknowledged all of it,
// unless RetainBytes or RetainAge (MaxDiskBytes outranks both) or HoldFrom
// keep it; a segment deleted while an older one still holds
// unacknowledged records leaves a tombstone. Empty drops everything.

// writeTombstone marks a fully acknowledged segment's acknowledgement file
// as standing for its deleted files. It replaces the bitmap whole
// (temporary file, fsync, rename, directory fsync), so a crash leaves
// either the full bitmap (every bit set: the segment is deleted again) or
// the tombstone, never a mix.
func (l *Log) writeTombstone(seg *segment) error {
	return l.writeAtomically(seg.path(ackSuffix), encodeAckHeader(seg.base, seg.endNow(), ackGone), nil)
}

// Empty discards every record put before the call, acknowledged or not,
// including segments kept by retention, and moves every cursor to the end.
// Records in flight are dropped too: acknowledging them afterwards returns
// ErrNotInFlight.
func (l *Log) Empty() error {
	if l.readOnly {
		return ErrReadOnly
	}
	return l.request(l.empty)
}

// findTombstones picks out the acknowledgement tombstones among the
// segments (ack.go): it returns the bases of logs still to open and, in
// order, those of segments deleted as fully acknowledged. A log whose
// tombstone is already written was being deleted when a crash came: its
// files are removed now.
func (l *Log) findTombstones(bases []uint64) (logs, ghosts []uint64) {
	for name := range l.listing {
		base, ok := parseSegmentName(name, ackSuffix)
		if !ok {
			continue
		}
		if size, err := l.listedSize(name); err != nil || size != ackHeaderSize {
			continue
		}
		b, err := readFile(l.fs, filepath.Join(l.dir, name))
		if err != nil {
			continue
		}
		if _, flags, err := decodeAckHeader(b, base); err == nil && flags&ackGone != 0 {
			ghosts = append(ghosts, base)
		}
	}
	slices.Sort(ghosts)
	for _, base := range bases {
		if _, found := slices.BinarySearch(ghosts, base); !found {
			logs = append(logs, base)
			continue
		}
		if l.readOnly {
			continue
		}
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			if err := l.fs.Remove(filepath.Join(l.dir, segmentName(base, suffix))); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.logger.Warn("diskqueue: cannot remove an acknowledged segment", "segment", base, "err", err)
			}
		}
	}
	return logs, ghosts
}

// removeTombstone deletes a tombstone no longer needed.
func (l *Log) removeTombstone(base uint64) {
	if l.readOnly {
		return
	}
	if err := l.fs.Remove(filepath.Join(l.dir, segmentName(base, ackSuffix))); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("diskqueue: cannot remove a tombstone", "segment", base, "err", err)
	}
}

// HoldFrom keeps the segments that hold records from seq on, even once
// every cursor has acknowledged them, until a later HoldFrom moves the
// hold. It is for a caller whose state a restart rebuilds from the records
// after seq (spillq's key state, stored every second): a crash must not
// find them deleted. The hold outranks MaxDiskBytes: a Put that finds the
// budget spent does not delete held segments to make room, as it does
// those retention keeps; it tells the holder (HoldPressure) and fails or
// waits as the options say, until the hold moves.
// HoldFrom(math.MaxUint64) holds nothing (the default).
func (l *Log) HoldFrom(seq uint64) {
	if seq == math.MaxUint64 {
		l.heldFrom.Store(0)
	} else {
		l.heldFrom.Store(seq + 1)
	}
	l.wake() // segments the old hold kept may go now
}

// HoldPressure returns a channel that receives when a Put found the disk
// budget spent while HoldFrom kept segments every cursor has
// acknowledged: the holder should store what it needs and move the hold,
// so that they can go and the Put be let in.
func (l *Log) HoldPressure() <-chan struct{} { return l.holdPressure }

// held reports whether HoldFrom keeps seg.
func (l *Log) held(seg *segment) bool {
	h := l.heldFrom.Load()
	return h > 0 && seg.endNow() > h-1
}

// housekeep deletes segments every record of which is acknowledged, except
// those retention (within the disk budget) or HoldFrom keeps, and rolls a fully consumed active segment when the
// disk budget asks for it.
func (l *Log) housekeep(now time.Time) {
	cursors := *l.cursorList.Load()
	// The look is published once its deletions are done: stored at the
	// start, a Put at the budget in between saw no acknowledgement since
	// it and failed, though the space was about to be freed. Meanwhile
	// acksLooked matches no count, so such a Put asks for room, and the
	// writer serves it after this; acknowledgements made from here on
	// count as not looked at.
	acks := l.acksSum()
	l.acksLooked.Store(-1)
	defer l.acksLooked.Store(acks)
	if l.rollRequested.Load() {
		l.rollRequested.Store(false)
		punch := l.punchRequested.Swap(false)
		l.mu.Lock()
		l.rollConsumedLocked(punch)
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
		isDone[i] = true
	}
	for _, c := range cursors {
		for i, d := range c.done(segs) {
			isDone[i] = isDone[i] && d
		}
	}
	// Acknowledged segments rotated out and not sealed yet cannot go this
	// round; a Put at the budget is to ask for room (makeRoom seals them
	// first), though no acknowledgement came since this look.
	sealing := false
	for i := range isDone {
		if segs[i].writing.Load() {
			sealing = sealing || isDone[i] && i < len(segs)-1
			isDone[i] = false
		}
	}
	l.ackedSealing.Store(sealing)
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
	// HoldFrom keeps the segments holding records from its seq on.
	for keep > 0 && l.held(segs[cands[keep-1]]) {
		keep--
	}
	// The disk budget outranks retention, not the hold (see HoldFrom).
	if max := l.opts.MaxDiskBytes; max > 0 {
		var freed int64
		for k := 0; k < len(cands); k++ {
			if k < keep {
				freed += segs[cands[k]].diskBytes()
				continue
			}
			if l.diskBytes.Load()-freed <= max || l.held(segs[cands[k]]) {
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
	if l.opts.housekeepHookForTesting != nil {
		l.opts.housekeepHookForTesting()
	}
	l.deleteAcknowledged(segs, cands[:keep])
}

// deleteAcknowledged deletes segs[i] for each i in del (sealed segments
// every record of which every cursor has acknowledged), and the
// tombstones left leading. segs is l.segs as the caller read it; only the
// writer goroutine, which calls this, takes segments out of it.
func (l *Log) deleteAcknowledged(segs []*segment, del []int) {
	// Store the cursors first so that, after a crash, none points into a
	// segment that no longer exists (Open would cope, but this is cheaper).
	for _, c := range *l.cursorList.Load() {
		c.persist()
	}
	going := make(map[int]bool, len(del))
	for _, i := range del {
		going[i] = true
	}
	// The prefix of segments going or gone leaves the list; a segment
	// deleted behind an unacknowledged one leaves a tombstone.
	prefix := 0
	for prefix < len(segs)-1 && (going[prefix] || segs[prefix].gone.Load()) {
		prefix++
	}
	l.dropSegments(prefix)
	for _, i := range del {
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
	ghosts := make([]bool, n)
	for i, s := range old {
		l.diskBytes.Add(-s.diskBytes())
		ghosts[i] = s.gone.Load()
		// A reader still in it (or Scan) must skip the rest, not hand out
		// what it had buffered: every cursor has acknowledged it all.
		s.gone.Store(true)
	}
	l.segMu.Unlock()
	for i, s := range old {
		if ghosts[i] {
			l.removeTombstone(s.base)
		} else {
			l.removeSegment(s)
		}
	}
}

// recycleActiveLocked makes room on a file system too full for the next
// segment: it frees the blocks of the active segment's records that every
// cursor has acknowledged (a hole punched in the log from its first record
// on; its size and offsets stay). With every record acknowledged it then
// rolls, and the segment is deleted once sealed; with a prefix, appends go
// on in it, and its first record kept is seg.keptFrom. Retained segments
// are not punched: retention keeps them for replay; nor is what HoldFrom
// holds. The caller holds l.mu and is the writer goroutine.
//
// A crash or power cut after the punch must find no unacknowledged record
// punched and the first record kept: each cursor's file is stored first,
// fsynced, at or past the punch (Open starts each cursor there, whatever
// its bitmaps lost), and the log and index are fsynced, so the record
// after the hole and its entry are durable.
func (l *Log) recycleActiveLocked() error {
	t := l.t
	floor := l.punchableLocked()
	p, ok := t.log.f.(puncher)
	if !ok || floor == 0 {
		// HoldFrom's holder (spillq's key state) may still read it.
		return fmt.Errorf("%w: cannot free the consumed active segment in place", ErrDiskFull)
	}
	whole := floor == t.end
	off := t.size
	if !whole {
		var err error
		if off, err = readIndexEntry(t.index.f, int64(floor-t.seg.base)); err != nil || off <= fileHeaderSize || off > t.size {
			return fmt.Errorf("%w: cannot free the acknowledged part of the active segment: index entry %d of %d: %v", ErrDiskFull, floor-t.seg.base, off, err)
		}
	}
	for _, c := range l.cursors {
		if err := c.store(); err != nil {
			return fmt.Errorf("%w: store cursor before freeing acknowledged records: %w", ErrDiskFull, err)
		}
	}
	if !l.opts.NoSync {
		if err := t.log.sync(t.size); err != nil {
			return fmt.Errorf("%w: fsync before freeing acknowledged records: %w", ErrDiskFull, err)
		}
		if err := t.index.sync(t.indexSize); err != nil {
			return fmt.Errorf("%w: fsync before freeing acknowledged records: %w", ErrDiskFull, err)
		}
	}
	if err := p.PunchHole(fileHeaderSize, off-fileHeaderSize); err != nil {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	t.seg.keptFrom.Store(floor)
	if !whole {
		l.crashPoint("punched-prefix")
		l.logger.Warn("diskqueue: file system full; freed the acknowledged part of the active segment's blocks", "segment", t.seg.base, "bytes", off-fileHeaderSize, "kept_from", floor)
		// Appends go on behind the hole, not in a new segment: a sealed
		// segment is freed only whole, so the records still unacknowledged
		// would keep the acknowledged ones after them on disk too.
		l.freed.Notify()
		return nil
	}
	// Its records are gone now: nothing may be appended behind the hole,
	// so until the roll succeeds every Put rolls first (or reports the
	// disk full).
	t.punched = true
	l.logger.Warn("diskqueue: file system full; freed the consumed active segment's blocks to roll it", "segment", t.seg.base, "bytes", t.size)
	return l.rotateLocked()
}

// punchableLocked is the seq below which recycleActiveLocked may free the
// active segment's records: the oldest some cursor has not acknowledged,
// not past HoldFrom's; 0 if that frees no whole block beyond what is
// freed already, or if retention keeps acknowledged records. The caller
// holds l.mu.
func (l *Log) punchableLocked() uint64 {
	t := l.t
	if t == nil || len(l.cursors) == 0 || l.opts.RetainBytes > 0 || l.opts.RetainAge > 0 {
		return 0
	}
	floor := t.end
	for _, c := range l.cursors {
		floor = min(floor, c.ackFloor.Load())
	}
	if h := l.heldFrom.Load(); h > 0 {
		floor = min(floor, h-1)
	}
	if floor <= max(t.seg.base, t.seg.keptFrom.Load()) {
		return 0
	}
	if floor == t.end {
		return floor
	}
	// Worth a punch only when it frees a block more than the last.
	off, err := readIndexEntry(t.index.f, int64(floor-t.seg.base))
	from := int64(fileHeaderSize)
	if k := t.seg.keptFrom.Load(); k > t.seg.base && err == nil {
		from, err = readIndexEntry(t.index.f, int64(k-t.seg.base))
	}
	if err != nil || off-from < allocUnit {
		return 0
	}
	return floor
}

// closeForDeletion closes a segment about to be deleted, and removes what
// an interrupted compaction of it left, before its log goes (or Open would
// finish that compaction).
func (l *Log) closeForDeletion(s *segment) {
	s.closeFiles()
	if s.leftovers.Load() {
		l.discardCompaction(s.base)
	}
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
	l.closeForDeletion(s)
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
	l.closeForDeletion(s)
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
		if err := c.rd.moveTo(t.seg, t.size, t.end); err != nil {
			c.rd.forget(t.end) // as in moveToEndLocked
		}
		c.ackedAbove.Store(0) // before the floor rises: see Cursor.Depth
		c.ackFloor.Store(t.end)
		c.handed.Store(c.acks.Load()) // nothing in flight
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
