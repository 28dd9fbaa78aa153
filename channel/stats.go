package channel

import "time"

// Depth is the number of messages waiting for delivery: Stats' MemoryDepth
// + DiskDepth + Ready. It leaves out messages in flight and deferred ones,
// in memory or in the backend (for a moment after New, not all of those
// in the backend: see Stats.Deferred). A message a Receive is taking at that moment
// is in neither Depth nor InFlight for an instant: to tell a channel has
// drained, see both at zero twice, with no Finish in between.
func (c *Channel) Depth() int64 {
	return int64(len(c.memCh)) + c.diskDepth() + c.ready.len()
}

// diskDepth is the messages in the backend waiting for delivery: for a
// topic's channel, the records of the topic's log it has not read yet and
// those the pump has ready.
func (c *Channel) diskDepth() int64 {
	if c.fan != nil {
		next, read := c.fan.log.NextSeq(), c.readThrough.Load()
		// A record may be read a moment before NextSeq counts it.
		return int64(next-min(read, next)) + int64(c.ahead.len())
	}
	return max(c.diskPending.Load()-c.diskDeferred.n.Load(), 0)
}

// Stats is a snapshot of a channel's state and counters.
type Stats struct {
	MemoryDepth int // messages in the memory buffer
	MemoryBound int // MemQueueSize
	// DiskDepth is the messages stored in the backend and waiting for
	// delivery: not yet handed to a consumer, and not deferred.
	DiskDepth int64
	// BackendDepth is the records in the backend not acknowledged,
	// including those of messages in flight or deferred.
	BackendDepth int64
	InFlight     int // delivered, not yet finished or requeued
	// Deferred is the messages put or requeued with a delay and not yet
	// released for delivery, wherever they wait: in the timer store (see
	// Options.Timers; counted from the moment a restart opens it), in
	// memory until their due time, or in the backend until the channel
	// reads them back. One in the backend counts here until it is read
	// back, even if its due time passes first because a backlog stands
	// before it. Deferred messages in the backend that were put before
	// New (by a version without a timer store, with a channel without
	// one, or with a key under KeyUnique or KeyReplace, whose record stays
	// in the backend while pending) count in DiskDepth until the channel
	// reads them back, and here from then on: New does not read the
	// backlog to find them.
	Deferred int
	Ready    int // requeued, timed out or released when due, waiting for delivery
	Paused   bool

	Puts        int64 // messages accepted by Put
	Spills      int64 // of those, written to the backend (a deferred one written to the timer store is not)
	Requeues    int64 // Requeue calls on messages in flight, also those that dead-lettered them (MaxAttempts)
	Timeouts    int64 // deliveries that timed out
	Finishes    int64
	DeadLetters int64 // taken by the dead-letter handler (attempts, Fail or expiry)
	Expired     int64 // of those, expired before delivery
	// Failed counts Fail calls (each then counts in DeadLetters once the
	// handler takes it); Released counts Release calls; DeadLetterErrors
	// counts the dead-letter handler's errors (each message it refused
	// kept and tried again).
	Failed, Released, DeadLetterErrors int64
	BadRecords                         int64 // backend records that were not channel messages
	// ReadErrors counts the backend's reads that failed (an I/O error, a
	// file cut short under the queue), each tried again 100 ms later;
	// ReadErr is the last one's error while they fail, nil once a read
	// succeeds. While reads fail, nothing of the backend is delivered and
	// Receive waits on.
	ReadErrors int64
	ReadErr    error

	// The key policy's (Options.Keys) figures, zero under KeyNone.
	// KeysPending is the keys with a message pending (KeyUnique,
	// KeyReplace), remembered within the window (KeyDedup) or being
	// worked on (KeySerial); KeyWaiting the messages waiting behind a
	// key's message (KeySerial; they count in no other depth); Duplicates
	// the Puts refused (KeyUnique, KeyDedup); Superseded the messages
	// replaced by a newer one before delivery (KeyReplace), counted as
	// the channel takes them, or as a compaction removes one the channel
	// has not read from the backend (one it has read ahead counts when it
	// is taken).
	KeysPending, KeyWaiting int
	Duplicates, Superseded  int64

	// End-to-end latency, from Put to Finish, of finished messages: the
	// upper bound of the histogram bucket (within 19%) holding each
	// percentile. While a backlog waits, one finish in 8 is timed and
	// stands for the others (a clock read is a good share of the memory
	// path); otherwise every finish is.
	LatencyP50, LatencyP99, LatencyP999 time.Duration
}

// Stats returns a snapshot of the channel's state and counters.
func (c *Channel) Stats() Stats {
	inFlight := c.inFlight()
	c.mu.Lock()
	st := Stats{
		InFlight: inFlight,
		Deferred: len(c.deferred) + int(c.diskDeferred.n.Load()),
		Ready:    len(c.ready.msgs),
		Paused:   c.isPaused(),
	}
	released := 0
	if c.timers != nil {
		released = len(c.timers.out)
	}
	c.mu.Unlock()
	if c.timers != nil {
		st.Deferred += max(int(c.timers.store.cur.Depth())-released, 0)
	}
	st.MemoryDepth = len(c.memCh)
	st.MemoryBound = c.opts.MemQueueSize
	st.DiskDepth = c.diskDepth()
	if c.src != nil {
		st.BackendDepth = c.src.Depth()
	}
	st.Puts = int64(c.prod.nextID.Load()-c.prod.firstID) - c.prod.putFailures.Load()
	st.Spills, st.Requeues = c.prod.spills.Load(), c.cons.requeues.Load()
	st.Timeouts, st.Finishes = c.cons.timeouts.Load(), c.cons.finishes.Load()
	st.DeadLetters, st.Expired, st.BadRecords = c.cons.deadLetters.Load(), c.cons.expired.Load(), c.cons.badRecords.Load()
	st.Failed, st.Released, st.DeadLetterErrors = c.cons.failed.Load(), c.cons.releases.Load(), c.cons.deadLetterErrors.Load()
	st.ReadErrors = c.cons.readErrors.Load()
	if e := c.cons.readErr.Load(); e != nil {
		st.ReadErr = *e
	}
	if c.keys != nil {
		st.KeysPending, st.KeyWaiting = c.keys.stats(c.stamp().UnixNano())
		st.Duplicates, st.Superseded = c.keys.duplicates.Load(), c.keys.superseded.Load()
	}
	st.Superseded += c.cons.superseded.Load()
	p := c.latency.Percentiles(0.5, 0.99, 0.999)
	st.LatencyP50, st.LatencyP99, st.LatencyP999 = p[0], p[1], p[2]
	return st
}

// LatencyBuckets returns the end-to-end latency histogram (Put to Finish)
// behind Stats' percentiles: the exclusive upper bound of each non-empty
// bucket and its count, bounds increasing. Buckets are four per power of two.
// The counts add up to the finishes; see Stats.LatencyP50 for how they are
// timed under load.
func (c *Channel) LatencyBuckets() (upper []time.Duration, counts []uint64) {
	return c.latency.Snapshot()
}

// LatencySumSeconds returns the sum, in seconds, of the latencies counted
// in [Channel.LatencyBuckets]: a histogram's _sum, exact for the finishes
// that were timed (see Stats.LatencyP50 for the others). Read after
// LatencyBuckets, it may include a few finishes that came in between.
func (c *Channel) LatencySumSeconds() float64 {
	return c.latency.SumSeconds()
}
