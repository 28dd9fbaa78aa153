package channel

import "sync/atomic"

// diskDeferred counts the deferred messages stored in the backend that the
// pump has not read back yet, for Stats: each is also in diskPending, but
// is not waiting for delivery.
//
// Those put since New are counted by putBackend, and counted off as the
// pump reads them back (or a compaction removes them). Those already in the
// backend at New (a restart), below end, are not looked for: New does not
// read the backlog. They count in DiskDepth until the pump reads them, and
// in Stats.Deferred from then on, as any deferred message it reads.
type diskDeferred struct {
	n atomic.Int64
	// end is the backend's NextSeq at New: records from end on were
	// counted by putBackend. Zero over a backend that does not number its
	// records, whose seqs say nothing of when a record was put: every
	// deferred record read is counted off then, never below zero.
	end uint64
}

// put counts a deferred message on its way to the backend; unput takes a
// failed one back.
func (d *diskDeferred) put()   { d.n.Add(1) }
func (d *diskDeferred) unput() { decrementToZero(&d.n) }

// read tells of a deferred record the pump has read.
func (d *diskDeferred) read(seq uint64) {
	if seq >= d.end {
		decrementToZero(&d.n)
	}
}

// removed tells of a deferred record a compaction removed before the pump
// read it: counted off as read would.
func (d *diskDeferred) removed(seq uint64) { d.read(seq) }

// empty forgets every deferred record in the backend.
func (d *diskDeferred) empty() { d.n.Store(0) }

// decrementToZero lowers n by one, never below zero: an Empty racing a
// Put can leave a record a count no longer includes.
func decrementToZero(n *atomic.Int64) {
	for {
		v := n.Load()
		if v <= 0 || n.CompareAndSwap(v, v-1) {
			return
		}
	}
}
