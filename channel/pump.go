package channel

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// pumpBatch is the most records the pump takes from its Cursor at once:
// one round trip to the cursor (and its lock, which the consumers'
// acknowledgements take too) for each batch.
const pumpBatch = 32

// readWarnChange is how soon after a warning of a failed backend read
// the pump warns again because reads fail otherwise.
const readWarnChange = 10 * time.Second

// pump moves records from the backend to consumers through ahead. Records
// it holds or has buffered are not acknowledged: if the channel closes
// first, they simply stay in the backend.
func (c *Channel) pump() {
	defer c.wg.Done()
	var recs [pumpBatch]diskqueue.Record
	var ready [pumpBatch]*Message
	// Messages are carved from blocks of pumpBatch, one allocation for
	// many, as the disk queue carves the bodies they alias: a message
	// kept after Finish keeps its block too, as its body keeps its slab.
	var block []Message
	var warned time.Time // the last warning of a failed read
	var warnedErr string // what it said
	for {
		n, err := c.src.ReadBatch(c.closeCtx, recs[:])
		if err != nil {
			if c.isClosed.Load() || errors.Is(err, ErrClosed) {
				return
			}
			c.cons.readErrors.Add(1)
			prev := c.cons.readErr.Swap(&err)
			// A sticky error fails every try: one warning when reads
			// start failing, then one a minute, and one when they fail
			// otherwise than last warned, at most every 10 s: two errors
			// that alternate (or one naming what changes from try to
			// try) would otherwise warn at every try.
			since := time.Since(warned)
			if prev == nil || since >= time.Minute || err.Error() != warnedErr && since >= readWarnChange {
				warned, warnedErr = time.Now(), err.Error()
				c.log.Warn("channel: backend read failed; retrying every 100 ms (Stats.ReadErr)", "err", err, "failures", c.cons.readErrors.Load())
			}
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-c.closeCh:
				return
			}
		}
		if c.cons.readErr.Load() != nil {
			c.cons.readErr.Store(nil)
			c.log.Info("channel: backend reads succeed again", "failures", c.cons.readErrors.Load())
		}
		c.countPasses()
		// Every record of the batch was read before this load: an Empty
		// from here on discards them all, as it discards what waits in
		// ahead. One that began before it and after the read discarded
		// them in the backend already, and set emptiedBelow before the
		// new gen: they are left out here, uncounted, as Empty counted
		// them off.
		gen := c.gen.Load()
		emptied := c.emptiedBelow.Load()
		k := 0
		for i := range n {
			seq := recs[i].Seq
			if seq < emptied {
				recs[i].Body = nil
				continue
			}
			if len(block) == 0 {
				block = make([]Message, pumpBatch)
			}
			if m := c.dispatch(seq, recs[i].Body, gen, &block[0]); m != nil {
				ready[k] = m
				k++
				block = block[1:]
			}
			recs[i].Body = nil // the body is the message's now
		}
		last := recs[n-1].Seq
		ok := c.handOver(ready[:k])
		clear(ready[:k])
		if c.fan != nil {
			// After the messages are in ahead: Channel.backlogged counts
			// each there or unread, never in neither.
			storeMax(&c.readThrough, last+1)
		}
		if !ok {
			return
		}
	}
}

// countPasses takes off diskPending the records the backend's reads
// passed over since the last look (Cursor.Passed): they were counted
// when stored, or at New, and will never be read. Called by the pump
// after each read, before what it read is handed on.
func (c *Channel) countPasses() {
	if c.backend == nil {
		return
	}
	n := c.src.Passed()
	if n == c.passesLooked {
		return // the common case: nothing passed over
	}
	c.passesLooked = n
	c.passMu.Lock()
	defer c.passMu.Unlock()
	for ; c.passesSeen < n; c.passesSeen++ {
		c.delivered()
	}
}

// dispatch decodes a record the pump read into slot, a zero Message, and
// returns it if it goes to consumers; otherwise it passes it on itself (to
// the deferred messages, or, not a message, acknowledged and dropped) and
// returns nil, leaving slot for the next record.
func (c *Channel) dispatch(seq uint64, body []byte, gen uint32, slot *Message) *Message {
	// By the same test as putBackend's, so a record it counted is
	// uncounted here even if it turns out not to decode.
	if envelopeHasDue(body) {
		c.diskDeferred.read(seq)
	}
	if err := decodeEnvelopeInto(body, slot); err != nil {
		*slot = Message{}
		c.cons.badRecords.Add(1)
		c.delivered()
		c.log.Warn("channel: dropping a backend record that is not a message", "seq", seq, "err", err)
		c.src.Ack(seq)
		return nil
	}
	m := slot
	m.ch, m.seq, m.src, m.gen = c, seq, srcBackend, gen
	if len(c.jBacklog) > 0 {
		c.journalBacklog(m)
	}
	if m.due != 0 && m.due > time.Now().UnixNano() {
		// A copy of its own: a deferred message may wait long, and should
		// not keep a block of others with it.
		m = m.kept()
		*slot = Message{}
		c.delivered()
		if c.toTimers(m) {
			// Moved to the timer store (a queue written before it had
			// one, where it failed, or a topic's deferred message): a new
			// record there, then this one acknowledged, once the new one
			// is durable (settleDue).
			c.deferToTimers(c.closeCtx, m, m.due)
			return nil
		}
		// Deferred: its record stays in the backend until it is
		// finished, so the due time survives a crash too.
		c.deferInMemory(m)
		return nil
	}
	m.due = 0
	return m
}

// handOver puts msgs in ahead, waiting for room as it must. It returns
// false when the channel closed first, keeping what it had not handed
// over in c.unsent (see Close).
func (c *Channel) handOver(msgs []*Message) bool {
	for len(msgs) > 0 {
		n := c.ahead.push(msgs)
		msgs = msgs[n:]
		if len(msgs) == 0 {
			break
		}
		select {
		case <-c.ahead.room:
		case <-c.closeCh:
			c.unsent = append(c.unsent, msgs...)
			return false
		}
	}
	return true
}

// aheadSize is how many backend records the pump may hold ready.
const aheadSize = 128

// readAhead is the pump's read-ahead of backend records, decoded and
// waiting for a consumer: a ring the pump fills a batch at a time and
// consumers take from one message at a time, each with one
// compare-and-swap of head (and one to clear the slot), taking no lock. A
// Go chan did this before, with a lock of its own taken for every message
// on both sides, where the pump and the consumers contended: the ring,
// with the pump's blocks of messages, took BenchmarkSpillDrain from 1033
// to 824 ns a message, and taking no lock in it a further 9% of the CPU a
// message costs, 634 to 575 ns (A/B medians on a loaded machine,
// 2026-12-01).
//
// Only the pump writes tail, after the slots it publishes; a consumer
// reads slot head, then claims it by moving head on. The pump writes a
// slot again only once head has passed it, so a consumer that read it
// before it was overwritten finds head moved and its claim refused.
//
// Messages in it are not in flight and not acknowledged: if the channel
// closes, they stay in the backend; diskPending counts them until taken,
// which keeps put order; Empty's generation check drops stale ones.
type readAhead struct {
	head atomic.Uint64 // the next slot to take
	_    [56]byte      // head is the consumers', tail the pump's
	tail atomic.Uint64 // the next slot to fill
	// pumpWaits says the pump found the ring full and waits on room.
	pumpWaits atomic.Bool
	// bell holds a token when messages may be waiting: the pump rings it
	// after each push, and a consumer waiting on it that takes a message
	// and leaves others rings it again for the next waiter. A token stays
	// until someone waits, so none is lost between a consumer's look and
	// its wait; a stale one costs a waiter a look.
	bell chan struct{}
	// room wakes the pump, waiting for room, once consumers have taken
	// half of a full ring: one wake-up per many messages, not one per
	// message.
	room chan struct{}
	buf  [aheadSize]atomic.Pointer[Message]
}

func (a *readAhead) init() {
	a.bell, a.room = make(chan struct{}, 1), make(chan struct{}, 1)
}

// len is how many messages wait; head is loaded first, so the difference
// never goes below zero.
func (a *readAhead) len() int {
	h := a.head.Load()
	return int(a.tail.Load() - h)
}

// push appends as many of msgs as there is room for, and reports how
// many; only the pump calls it. Finding no room for them all, it marks
// itself waiting, unless consumers took half the ring meanwhile (the
// pop that did may have looked at pumpWaits before it was set).
func (a *readAhead) push(msgs []*Message) int {
	t := a.tail.Load()
	k := min(len(msgs), aheadSize-int(t-a.head.Load()))
	for i, m := range msgs[:k] {
		a.buf[(t+uint64(i))%aheadSize].Store(m)
	}
	a.tail.Store(t + uint64(k))
	if k > 0 {
		a.ring()
	}
	if k < len(msgs) {
		a.pumpWaits.Store(true)
		if a.len() <= aheadSize/2 && a.pumpWaits.CompareAndSwap(true, false) {
			a.wakePump()
		}
	}
	return k
}

// pop takes the oldest message, or returns nil; more reports whether
// others wait behind it.
func (a *readAhead) pop() (m *Message, more bool) {
	for {
		h := a.head.Load()
		t := a.tail.Load()
		if h == t {
			return nil, false
		}
		slot := &a.buf[h%aheadSize]
		m = slot.Load()
		if !a.head.CompareAndSwap(h, h+1) {
			continue
		}
		// Unless the pump has filled it again already: a message taken
		// is not kept alive by the ring.
		slot.CompareAndSwap(m, nil)
		if a.pumpWaits.Load() && a.len() <= aheadSize/2 && a.pumpWaits.CompareAndSwap(true, false) {
			a.wakePump()
		}
		return m, t > h+1
	}
}

// drain empties the ring and returns what it held, oldest first.
func (a *readAhead) drain() []*Message {
	var out []*Message
	for {
		m, _ := a.pop()
		if m == nil {
			return out
		}
		out = append(out, m)
	}
}

func (a *readAhead) wakePump() {
	select {
	case a.room <- struct{}{}:
	default:
	}
}

func (a *readAhead) ring() {
	select {
	case a.bell <- struct{}{}:
	default:
	}
}
