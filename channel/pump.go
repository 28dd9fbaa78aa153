package channel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// pumpBatch is the most records one read takes from the Cursor: one
// round trip to the cursor (and its lock, which the consumers'
// acknowledgements take too) for each batch.
const pumpBatch = 32

// readWarnChange is how soon after a warning of a failed backend read
// the pump warns again because reads fail otherwise.
const readWarnChange = 10 * time.Second

// backendReader is the state of reading the backend, all under mu: one
// reader at a time, the pump or a receiver (readDirect), reads a batch,
// decodes it and puts what goes to consumers in the read-ahead before it
// lets go, and reads only with room there for a whole batch. So reads
// hand out records in the Cursor's order, and a reader that holds mu and
// finds the read-ahead empty knows nothing read before its own read is
// waiting there.
//
// Receivers only ever TryLock mu; the pump alone waits for it, and holds
// it while its read waits for records: nothing waits on a goroutine
// that holds it.
type backendReader struct {
	mu    sync.Mutex
	recs  [pumpBatch]diskqueue.Record
	ready [pumpBatch]*Message
	// Messages are carved from blocks of pumpBatch, one allocation for
	// many, as the disk queue carves the bodies they alias: a message
	// kept after Finish keeps its block too, as its body keeps its slab.
	block []Message
	last  uint64 // the seq of the last record of the last read
	full  bool   // the last read filled recs: the Cursor may hold more

	warned    time.Time // the last warning of a failed read
	warnedErr string    // what it said
}

// The delivery model. Receivers take, in this order, from the ready list,
// the memory buffer, the read-ahead, and the backend itself (readDirect):
// a receiver that finds all of them empty reads the next batch, keeps its
// first message and leaves the rest in the read-ahead, in order, for the
// next takers. A backlog drains without a hand-off between goroutines.
//
// The pump reads for receivers that wait: it waits for records when there
// are none, puts them in the read-ahead and rings its bell. It reads on
// while its reads find the Cursor caught up (fewer records than a batch:
// it is the one waiting for the next ones, as with a producer feeding
// receivers that keep up) or leave nothing for consumers (deferred, stale
// or bad records, so deferred records are moved on), and while the
// read-ahead has room for a batch. After a full batch (a backlog, which
// the receivers read themselves) or with no room, it waits until a
// receiver about to wait (take) asks for a read (readAhead.want).
//
// Order across the sources is put order (see the package doc): memory
// holds only messages older than any in the backend, since Put sends to
// memory only while diskPending is zero, and diskPending counts every
// record until it is taken from the read-ahead or by a direct read. A
// receiver looks at memory before the backend, and at the read-ahead again
// under mu before it reads past it.
//
// Records read and not yet taken are not in flight and not acknowledged:
// if the channel closes first, they simply stay in the backend, and Close
// gives a topic's cursor back what the read-ahead holds (collectHeld),
// after the pump has returned and the receivers have left take.

// pump reads the backend for receivers that wait (see above).
func (c *Channel) pump() {
	defer c.wg.Done()
	r := c.reader
	for {
		r.mu.Lock()
		if c.ahead.len() > aheadSize-pumpBatch {
			// No room for a batch: the receivers have this much to take
			// first, and ask once they have taken it all.
			r.mu.Unlock()
		} else {
			msgs, err := c.readBatch(c.closeCtx)
			if err != nil {
				closed := c.isClosed.Load() || errors.Is(err, ErrClosed)
				if !closed {
					c.readFailed(err)
				}
				r.mu.Unlock()
				if closed {
					return
				}
				select {
				case <-time.After(100 * time.Millisecond):
					continue
				case <-c.closeCh:
					return
				}
			}
			c.ahead.push(msgs)
			c.readDone(len(msgs))
			full := r.full
			r.mu.Unlock()
			if len(msgs) == 0 || !full {
				// Nothing for consumers yet (the request stands), or
				// caught up with the Cursor: wait for its next records.
				continue
			}
		}
		select {
		case <-c.ahead.want:
		case <-c.closeCh:
			return
		}
	}
}

// readDirect reads the next batch from the backend for a receiver that
// found nothing to take, and returns its first message, taken; the rest
// waits in the read-ahead. It returns nil if another reader holds the
// backend (the pump waiting for records, or a receiver, which leaves
// what it read in the read-ahead), if there is nothing to read, or while
// reads fail (the pump retries them).
func (c *Channel) readDirect() *Message {
	if c.isClosed.Load() || c.cons.readErr.Load() != nil {
		return nil
	}
	r := c.reader
	if !r.mu.TryLock() {
		return nil
	}
	defer r.mu.Unlock()
	// The read-ahead gains nothing while mu is held: empty now, it holds
	// nothing older than what the read below returns.
	if m, _ := c.ahead.pop(); m != nil {
		c.takenAhead(m)
		return m
	}
	msgs, err := c.readBatch(doneCtx)
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) && !c.isClosed.Load() {
			c.readFailed(err)
		}
		return nil
	}
	if len(msgs) == 0 {
		c.readDone(0)
		return nil
	}
	m := msgs[0]
	c.ahead.push(msgs[1:])
	c.readDone(len(msgs))
	c.takenAhead(m)
	return m
}

// readBatch reads the next records from the Cursor (waiting for some as
// long as ctx lets it) and decodes them; it returns, in c.reader.ready,
// oldest first, those that go to consumers. The caller holds c.reader.mu,
// and calls readDone once it has put them where they go.
func (c *Channel) readBatch(ctx context.Context) ([]*Message, error) {
	r := c.reader
	n, err := c.src.ReadBatch(ctx, r.recs[:])
	r.full = n == len(r.recs)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
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
		seq := r.recs[i].Seq
		if seq < emptied {
			r.recs[i].Body = nil
			continue
		}
		if len(r.block) == 0 {
			r.block = make([]Message, pumpBatch)
		}
		if m := c.dispatch(seq, r.recs[i].Body, gen, &r.block[0]); m != nil {
			r.ready[k] = m
			k++
			r.block = r.block[1:]
		}
		r.recs[i].Body = nil // the body is the message's now
	}
	r.last = r.recs[n-1].Seq
	return r.ready[:k], nil
}

// readDone ends a read of k messages for consumers, once they are where
// they go. The caller holds c.reader.mu.
func (c *Channel) readDone(k int) {
	r := c.reader
	clear(r.ready[:k])
	if c.fan != nil {
		// After the messages are in ahead: diskDepth counts each there
		// or unread, never in neither.
		storeMax(&c.readThrough, r.last+1)
	}
}

// readFailed counts and reports a failed read of the backend. The caller
// holds c.reader.mu.
func (c *Channel) readFailed(err error) {
	r := c.reader
	c.cons.readErrors.Add(1)
	prev := c.cons.readErr.Swap(&err)
	// A sticky error fails every try: one warning when reads
	// start failing, then one a minute, and one when they fail
	// otherwise than last warned, at most every 10 s: two errors
	// that alternate (or one naming what changes from try to
	// try) would otherwise warn at every try.
	since := time.Since(r.warned)
	if prev == nil || since >= time.Minute || err.Error() != r.warnedErr && since >= readWarnChange {
		r.warned, r.warnedErr = time.Now(), err.Error()
		c.log.Warn("channel: backend read failed; retrying every 100 ms (Stats.ReadErr)", "err", err, "failures", c.cons.readErrors.Load())
	}
}

// countPasses takes off diskPending the records the backend's reads
// passed over since the last look (Cursor.Passed): they were counted
// when stored, or at New, and will never be read. Called by a reader
// (holding c.reader.mu) after each read, before what it read is handed on.
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

// aheadSize is how many backend records the read-ahead holds: the pump
// reads on while it has room for a batch.
const aheadSize = 128

// readAhead is the read-ahead of backend records, decoded and waiting for
// a consumer: a ring a reader (see backendReader) fills a batch at a time
// and consumers take from one message at a time, each with one
// compare-and-swap of head (and one to clear the slot), taking no lock. A
// Go chan did this before, with a lock of its own taken for every message
// on both sides, where the pump and the consumers contended: the ring,
// with the pump's blocks of messages, took BenchmarkSpillDrain from 1033
// to 824 ns a message, and taking no lock in it a further 9% of the CPU a
// message costs, 634 to 575 ns (A/B medians on a loaded machine,
// 2026-12-01).
//
// Only a reader holding backendReader.mu writes tail, after the slots it
// publishes, and only with room for a whole batch, which consumers only
// add to; a consumer reads slot head, then claims it by moving head on. A slot is
// written again only once head has passed it, so a consumer that read it
// before it was overwritten finds head moved and its claim refused.
//
// Messages in it are not in flight and not acknowledged: if the channel
// closes, they stay in the backend; diskPending counts them until taken,
// which keeps put order; Empty's generation check drops stale ones.
type readAhead struct {
	head atomic.Uint64 // the next slot to take
	_    [56]byte      // head is the consumers', tail the reader's
	tail atomic.Uint64 // the next slot to fill
	// bell holds a token when messages may be waiting: a reader rings it
	// after each push, and a consumer waiting on it that takes a message
	// and leaves others rings it again for the next waiter. A token stays
	// until someone waits, so none is lost between a consumer's look and
	// its wait; a stale one costs a waiter a look.
	bell chan struct{}
	// want asks the pump for a read: a receiver found nothing to take
	// and waits. A token, as bell's: one asked before the pump waits for
	// it is not lost.
	want chan struct{}
	buf  [aheadSize]atomic.Pointer[Message]
}

func (a *readAhead) init() {
	a.bell, a.want = make(chan struct{}, 1), make(chan struct{}, 1)
}

// len is how many messages wait; head is loaded first, so the difference
// never goes below zero.
func (a *readAhead) len() int {
	h := a.head.Load()
	return int(a.tail.Load() - h)
}

// push appends msgs, at most pumpBatch, to a ring with room for
// pumpBatch; the caller holds backendReader.mu.
func (a *readAhead) push(msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	t := a.tail.Load()
	for i, m := range msgs {
		a.buf[(t+uint64(i))%aheadSize].Store(m)
	}
	a.tail.Store(t + uint64(len(msgs)))
	a.ring()
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
		// Unless a reader has filled it again already: a message taken
		// is not kept alive by the ring.
		slot.CompareAndSwap(m, nil)
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

// ask asks the pump for a read.
func (a *readAhead) ask() {
	select {
	case a.want <- struct{}{}:
	default:
	}
}

func (a *readAhead) ring() {
	select {
	case a.bell <- struct{}{}:
	default:
	}
}
