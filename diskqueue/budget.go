package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// fullLocked reports ErrDiskFull if a frame of n more bytes would break the
// disk budget.
func (l *Log) fullLocked(n int64) error {
	max := l.opts.MaxDiskBytes
	if max == 0 {
		return nil
	}
	used := l.diskBytes.Load()
	if l.t != nil {
		used += l.t.unaccounted
	}
	if used+l.budgetLocked(n) <= max {
		return nil
	}
	return fmt.Errorf("%w: %d bytes used, %d more would pass MaxDiskBytes %d", ErrDiskFull, used, n, max)
}

// budgetLocked is what a frame of n bytes needs of the disk budget, beyond
// what the log holds. Besides the frame and its index entry, the record
// takes a bit in each cursor's bitmap (at worst a byte more in each), and a
// rotation adds three file headers, a time entry or two and each cursor's
// bitmap header: what diskBytes will count for them (segment.diskBytes).
func (l *Log) budgetLocked(n int64) int64 { return budgetFor(n, len(l.cursors)) }

// budgetFor is budgetLocked for a log with the given number of cursors.
func budgetFor(n int64, cursors int) int64 {
	bitmaps := int64(cursors)
	reserve := int64(3*fileHeaderSize+3*timeIndexEntrySize) + bitmaps*ackHeaderSize
	return n + indexEntrySize + bitmaps + reserve
}

// emptyLogBytes is what a log holding no record takes of the disk
// budget: one segment's three file headers and each cursor's bitmap
// header.
func emptyLogBytes(cursors int) int64 {
	return int64(3*fileHeaderSize) + int64(cursors)*ackHeaderSize
}

// requestRollLocked asks the writer to roll the active segment when every
// record in it is acknowledged: on a full disk (the budget's or the file
// system's) no consumer will ever free that space otherwise. With fsFull
// (the file system's, not the budget's) it asks as well when only a prefix
// of the active segment is acknowledged: the writer frees that prefix's
// blocks in place (recycleActiveLocked), so that consumers who keep up
// free room for as much as they acknowledged, though a segment goes whole
// only once all of it is.
//
// It reports whether the roll is coming and will free the active segment's
// space: it holds records, every one acknowledged (or, with fsFull, a
// prefix worth freeing), and HoldFrom does not keep it.
func (l *Log) requestRollLocked(fsFull bool) bool {
	consumed := l.consumedLocked()
	if !consumed && !(fsFull && l.punchableLocked() > 0) {
		return false
	}
	if !consumed && !l.punchRequested.Load() {
		l.punchRequested.Store(true)
	}
	if !l.rollRequested.Load() {
		l.rollRequested.Store(true)
		l.wake()
	}
	t := l.t
	return t != nil && t.end > t.seg.base && (!consumed || !l.held(t.seg))
}

// rollConsumedLocked rolls the active segment if every cursor has
// acknowledged every record in it, so that it can go once sealed; on a file
// system too full for the next segment it frees the active one's blocks in
// place first (recycleActiveLocked). With punch (a Put found the file
// system full) it frees those of the acknowledged prefix when not every
// record is acknowledged. It reports whether it rolled or freed space. The
// caller holds l.mu and is the writer goroutine.
func (l *Log) rollConsumedLocked(punch bool) bool {
	t := l.t
	if t == nil || t.end == t.seg.base || l.writeErr != nil {
		return false
	}
	var err error
	if !l.consumedLocked() {
		if !punch {
			return false
		}
		err = l.recycleActiveLocked()
	} else if err = l.rotateLocked(); errors.Is(err, ErrDiskFull) {
		// No room even for the next segment's first pages: the active
		// one holds nothing unacknowledged, so it goes first.
		err = l.recycleActiveLocked()
	}
	if err != nil && !errors.Is(err, ErrDiskFull) {
		l.failLocked(err)
	}
	return err == nil
}

// acksSum is how many acknowledgements the log's cursors have made since
// Open. The writer notes it each time housekeeping has deleted what every
// cursor has acknowledged (acksLooked): a Put at the budget that sees it
// moved since asks the writer to make room at once (makeRoom, which
// deletes only as much as the Put needs, so the next such Put asks too)
// rather than fail while the space it needs is acknowledged.
func (l *Log) acksSum() int64 {
	var n int64
	for _, c := range *l.cursorList.Load() {
		n += c.acks.Load()
	}
	return n
}

// consumedLocked reports whether every cursor has acknowledged every
// record (false with no cursor: nothing is consumed). The caller holds
// l.mu.
func (l *Log) consumedLocked() bool {
	end := l.nextSeq.Load()
	for _, c := range l.cursors {
		if c.ackFloor.Load() != end {
			return false
		}
	}
	return len(l.cursors) > 0
}

// waitForSpace blocks until space may have been freed: this queue
// deleted a segment (freed), or a while passed in which another process
// may have freed some. It returns early when ctx ends or the queue closes.
func (l *Log) waitForSpace(ctx context.Context, freed <-chan struct{}) error {
	retry := time.NewTimer(fullRetryInterval)
	defer retry.Stop()
	select {
	case <-freed:
		return nil
	case <-retry.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.closeCh:
		return ErrClosed
	}
}
