package spillq

import (
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TimersDir is the subdirectory of a queue's directory that holds its timer
// store: a disk queue of its own holding only the deferred messages
// (FORMAT.md, "Timer store").
const TimersDir = "timers"

// maxTimerSegmentBytes caps the timer store's segments: a message deferred
// for long keeps its segment, so they are smaller than the main log's.
const maxTimerSegmentBytes = 4 << 20

// timerOptions derives the timer store's options from the main log's
// (already defaulted by Open as far as record limits go).
func timerOptions(o diskqueue.Options) diskqueue.Options {
	seg := o.MaxSegmentBytes
	if seg == 0 || seg > maxTimerSegmentBytes {
		seg = maxTimerSegmentBytes
	}
	// Everything else as the main log, so an option added later is not
	// dropped here: under SyncEvery 1 a deferral's Put returns once it is
	// on stable storage, concurrent ones sharing an fsync. No
	// BlockWhenFull: a deferral that finds the store full stays in memory
	// (and in the main log) rather than block a Requeue. No retention:
	// timers are not replayed. No hold unless Open asks (a KeyDedup state
	// is rebuilt from the timer store too).
	t := o
	t.MaxSegmentBytes = seg
	t.BlockWhenFull, t.RetainBytes, t.RetainAge, t.HoldAtOpen = false, 0, 0, false
	return t
}

// DiskTimers is [DiskBackend]: a disk queue as a channel's timer store
// (channel.Options.Timers), for a channel paired with a disk queue by hand;
// [Open] makes one in the queue's [TimersDir]. The channel takes ownership
// of it: q must be used for nothing else, and must not have been read from.
func DiskTimers(q *diskqueue.Queue) channel.Store { return DiskBackend(q) }
