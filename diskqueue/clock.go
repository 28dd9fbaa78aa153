package diskqueue

import (
	"sync/atomic"
	"time"
)

// Record timestamps. A clock read costs 40 to 55 ns on the virtual
// machines this runs on (the TSC read alone is 20 ns there), a fifth of a
// Put, so one reading stamps the records put soon after it: at most
// clockReuse of them, and none after the preparer goroutine's next tick,
// which comes every clockPeriod while Puts come. A record's timestamp is
// therefore a reading taken before its Put returned, never after; it is
// at most clockReuse-1 records and normally at most about clockPeriod
// older than the Put (longer only while the process is so short of CPU
// that the preparer is not scheduled); and, the clock being monotonic,
// never less than an earlier record's.
//
// The ticker stops after clockIdleTicks ticks without a reading, so an
// idle log costs nothing; stopping starts a new tick first, so the next
// Put reads the clock itself and wakes the ticker. A reading whose tick
// has passed is never used, so either the ticker runs or the reading in
// use was taken since it stopped.
const (
	clockPeriod    = time.Millisecond
	clockReuse     = 64
	clockIdleTicks = 16
)

type clock struct {
	// Guarded by l.mu: the last reading, the tick it was taken in, and how
	// many more records may have it.
	now  int64
	tick uint32
	left int

	// ticks numbers the ticks; a reading is good only in its own.
	ticks atomic.Uint32
	// used says a reading was taken since the last tick.
	used atomic.Bool
	// parked says the ticker stopped; the Put that clears it wakes the
	// ticker (wake, capacity 1).
	parked atomic.Bool
	wake   chan struct{}
	// idle counts the ticks without a reading; only the ticker uses it.
	idle int
}

func (c *clock) init() {
	c.wake = make(chan struct{}, 1)
	c.parked.Store(true) // until the first Put
}

// stampLocked is the timestamp of the record being appended. The caller
// holds l.mu.
func (l *Log) stampLocked() int64 {
	c := &l.clock
	if c.left > 0 && c.tick == c.ticks.Load() {
		c.left--
		return c.now
	}
	return l.readClockLocked()
}

// readClock is a reading of the log's clock taken now: the wall clock at
// Open plus the monotonic time since, immune to the wall clock stepping
// while the log is open (adding nanoseconds, not time.Time.Add, is the same
// sum without building a Time). It takes no lock and leaves the reading
// Puts share alone.
func (l *Log) readClock() int64 {
	if l.opts.clockForTesting != nil {
		return l.opts.clockForTesting().UnixNano()
	}
	return l.startedNano + int64(time.Since(l.started))
}

// readClockLocked takes a new reading (readClock) for the Puts that follow
// to share. The tick is loaded before parked is: a Put that sees
// the tick the stopping ticker started also sees it stopped, and wakes it.
func (l *Log) readClockLocked() int64 {
	if l.opts.clockForTesting != nil {
		return l.opts.clockForTesting().UnixNano()
	}
	c := &l.clock
	c.tick = c.ticks.Load()
	c.now = l.readClock()
	c.left = clockReuse - 1
	if !c.used.Load() {
		c.used.Store(true)
	}
	if c.parked.Load() && c.parked.CompareAndSwap(true, false) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return c.now
}

// advance is one tick; it reports whether the ticker goes on. Stopping
// sets parked before starting the tick, so that a reading taken in the
// new tick is taken by a Put that sees parked and wakes the ticker.
func (c *clock) advance() bool {
	c.ticks.Add(1)
	if c.used.Swap(false) {
		c.idle = 0
		return true
	}
	if c.idle++; c.idle < clockIdleTicks {
		return true
	}
	c.idle = 0
	c.parked.Store(true)
	c.ticks.Add(1)
	return false
}
