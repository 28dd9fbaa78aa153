package channel

import (
	"errors"
	"time"
)

// pumpBatch is the most records the pump takes from a BatchSource at once.
const pumpBatch = 32

// pump moves records from the backend to consumers through diskCh. Records
// it holds or has buffered are not acknowledged: if the channel closes
// first, they simply stay in the backend.
func (c *Channel) pump() {
	defer c.wg.Done()
	bs, batched := c.src.(BatchSource)
	if _, ok := c.src.(Unreader); ok {
		batched = false // see BatchSource
	}
	var seqs [pumpBatch]uint64
	var bodies [pumpBatch][]byte
	for {
		n, err := 1, error(nil)
		if batched {
			n, err = bs.ReadBatch(c.closeCtx, seqs[:], bodies[:])
		} else {
			seqs[0], bodies[0], err = c.src.Read(c.closeCtx)
		}
		if err != nil {
			if c.isClosed.Load() || errors.Is(err, ErrClosed) {
				return
			}
			c.log.Warn("channel: backend read failed; retrying", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-c.closeCh:
				return
			}
		}
		// Every record of the batch was read before this load: an Empty
		// from here on discards them all, as it discards what waits in
		// diskCh.
		gen := c.gen.Load()
		for i := range n {
			ok := c.dispatch(seqs[i], bodies[i], gen)
			bodies[i] = nil // the body is the message's now
			if c.fan != nil {
				// After m is in diskCh: Channel.backlogged counts it there or
				// unread, never in neither.
				storeMax(&c.readThrough, seqs[i]+1)
			}
			if !ok {
				return
			}
		}
	}
}

// dispatch passes on a record the pump read: to diskCh, to the deferred
// messages, or (not a message) acknowledged and dropped. It returns false
// when the channel closed first.
func (c *Channel) dispatch(seq uint64, body []byte, gen uint32) bool {
	// By the same test as the scan's, so a record it counted is uncounted
	// here even if it turns out not to decode.
	c.diskDeferred.read(seq, envelopeHasDue(body))
	m, err := decodeEnvelope(body)
	if err != nil {
		c.cons.badRecords.Add(1)
		c.delivered()
		c.log.Warn("channel: dropping a backend record that is not a message", "seq", seq, "err", err)
		c.src.Ack(seq)
		return true
	}
	m.ch, m.seq, m.src, m.gen = c, seq, srcBackend, gen
	if m.due != 0 && m.due > time.Now().UnixNano() {
		c.delivered()
		if c.toTimers(m) {
			// Moved to the timer store (a queue written before it had
			// one, where it failed, or a topic's deferred message): a new
			// record there, then this one acknowledged.
			c.deferToTimers(c.closeCtx, m, m.due)
			return true
		}
		// Deferred: its record stays in the backend until it is
		// finished, so the due time survives a crash too.
		c.deferInMemory(m)
		return true
	}
	m.due = 0
	// The receiver lowers diskPending as it takes m (see take), so Depth
	// is exact the moment Receive returns. A send that need not wait is
	// tried first: it costs a fraction of a two-case select, and while
	// consumers keep up the buffer has room.
	select {
	case c.diskCh <- m:
		return true
	default:
	}
	select {
	case c.diskCh <- m:
		return true
	case <-c.closeCh:
		c.unsent = m // see Close
		return false
	}
}
