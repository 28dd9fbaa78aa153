package channel

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The delivery journal (Options.Deliveries) keeps a message's attempts
// where a crash cannot lose them. A record's envelope carries the attempts
// of its last write (Close, a deferral), and a process that dies in the
// middle of a delivery writes nothing more: without the journal a handler
// that kills its process (OOM, a fault in cgo, os.Exit in a library) got
// its message again after every restart with the same count, never
// dead-lettered. So before the channel hands out a message that has a
// record, it puts a journal record naming that record and the attempts
// this delivery makes; the message remembers it (Message.jrec), and it is
// acknowledged when a newer one is written for the message (its next
// delivery, a Release) or when the message's record is acknowledged
// (finished, dead-lettered, moved to the timer store or stored again at
// Close). At New the channel reads what is left: the attempts of each
// record not yet acknowledged, which a message read from that record then
// takes if they are more than its envelope's.

// The journal record (FORMAT.md, "Delivery journal"):
//
//	0     1       2            10           12
//	| ver | store | seq u64    | attempts u16 |
const (
	journalVersion    = 1
	journalBackend    = 1 // seq is a record of the channel's Backend, or its topic's log
	journalTimers     = 2 // seq is a record of its timer store
	journalRecordSize = 12
)

// errBadJournal is a journal record that does not decode: it is dropped.
var errBadJournal = errors.New("channel: not a delivery journal record")

func appendJournal(dst []byte, store byte, seq uint64, attempts uint16) []byte {
	dst = append(dst, journalVersion, store)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return binary.BigEndian.AppendUint16(dst, attempts)
}

func decodeJournal(b []byte) (store byte, seq uint64, attempts uint16, err error) {
	if len(b) != journalRecordSize {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes, want %d", errBadJournal, len(b), journalRecordSize)
	}
	if b[0] != journalVersion {
		return 0, 0, 0, fmt.Errorf("%w: version %d", errBadJournal, b[0])
	}
	if b[1] != journalBackend && b[1] != journalTimers {
		return 0, 0, 0, fmt.Errorf("%w: store %d", errBadJournal, b[1])
	}
	return b[1], binary.BigEndian.Uint64(b[2:10]), binary.BigEndian.Uint16(b[10:12]), nil
}

// journalStore is the journal's store byte for a message's source.
func journalStore(src msgSource) byte {
	if src == srcTimers {
		return journalTimers
	}
	return journalBackend
}

// journalEntry is what the journal says of one record of a store: the
// most attempts it counts, and the journal record that says so.
type journalEntry struct {
	seq      uint64 // the record's, in its store
	rec      uint64 // the journal's record
	attempts uint16
}

// journal is the channel's view of Options.Deliveries.
type journal struct {
	store *seqStore
	// write is set with MaxAttempts: deliveries are recorded. Without,
	// the entries a former run left are read and acknowledged, and no
	// new ones are written (a count that changes nothing is not worth a
	// write per delivery).
	write  bool
	warned atomic.Int64 // Unix ns of the last warning of a failed write
	// timers holds the timer store's records named by entries read at
	// New, until the channel takes each (releaseTimers); ntimers is its
	// length, for a look without the lock.
	mu      sync.Mutex
	timers  map[uint64]journalEntry
	ntimers atomic.Int64
}

// journalBufs recycles the buffers journal records are encoded into: the
// store's Put does not keep its argument.
var journalBufs = sync.Pool{New: func() any { return new([journalRecordSize]byte) }}

// put writes a journal record; it reports false, warning at most every 10
// s, if it could not.
func (c *Channel) journalPut(store byte, seq uint64, attempts uint16) (uint64, bool) {
	j := c.jrn
	buf := journalBufs.Get().(*[journalRecordSize]byte)
	rec, err := j.store.put(context.Background(), appendJournal(buf[:0], store, seq, attempts))
	journalBufs.Put(buf)
	if stored(err) {
		return rec, true
	}
	now := time.Now().UnixNano()
	if last := j.warned.Load(); now-last >= int64(10*time.Second) && j.warned.CompareAndSwap(last, now) {
		c.log.Warn("channel: cannot write to the delivery journal; a crash may deliver these messages with fewer attempts counted", "err", err)
	}
	return 0, false
}

// journalAck acknowledges journal record rec. A failure leaves it to the
// next New, which drops it once its message's record is acknowledged.
func (c *Channel) journalAck(rec uint64) { _ = c.jrn.store.ack(rec) }

// journalDeliver records the delivery deliver is about to make of m, and
// acknowledges the journal record m had (its last delivery's, or the one
// New read): from now on the new one counts.
func (c *Channel) journalDeliver(m *Message) {
	old := m.jrec
	if c.jrn.write && m.src != srcMemory {
		rec, ok := c.journalPut(journalStore(m.src), m.seq, addAttempt(m.Attempts))
		if !ok {
			return // the old one, if any, still counts what it did
		}
		m.jrec = rec + 1
	} else {
		m.jrec = 0
	}
	if old != 0 {
		c.journalAck(old - 1)
	}
}

// addAttempt is n+1, saturated.
func addAttempt(n uint16) uint16 {
	if n == ^uint16(0) {
		return n
	}
	return n + 1
}

// journalUnspent brings m's journal record in line with a delivery taken
// back (Release, Close): m.Attempts no longer counts it. A record saying
// so replaces the delivery's; acknowledging that one alone would lose the
// deliveries before it too. If the write fails, the old record stays, and
// a crash counts the delivery taken back once.
func (c *Channel) journalUnspent(m *Message) {
	if c.jrn == nil || m.jrec == 0 {
		return
	}
	old := m.jrec
	m.jrec = 0
	if c.jrn.write && m.Attempts > 0 {
		rec, ok := c.journalPut(journalStore(m.src), m.seq, m.Attempts)
		if !ok {
			m.jrec = old
			return
		}
		m.jrec = rec + 1
	}
	c.journalAck(old - 1)
}

// journalBacklog gives m, read from the Cursor, the attempts the journal
// counts for its record, and the journal record that says so. Only a
// reader holding c.reader.mu calls it, in the order of the Cursor's reads: entries for records
// before m's are of records the reads passed (acknowledged before the
// crash, or discarded), and are acknowledged.
func (c *Channel) journalBacklog(m *Message) {
	b := c.jBacklog
	for len(b) > 0 && b[0].seq < m.seq {
		c.journalAck(b[0].rec)
		b = b[1:]
	}
	if len(b) > 0 && b[0].seq == m.seq {
		m.Attempts = max(m.Attempts, b[0].attempts)
		m.jrec = b[0].rec + 1
		b = b[1:]
	}
	if len(b) == 0 {
		b = nil
	}
	c.jBacklog = b
}

// journalTimer is journalBacklog for m, read from the timer store.
func (c *Channel) journalTimer(m *Message) {
	j := c.jrn
	j.mu.Lock()
	e, ok := j.timers[m.seq]
	if ok {
		delete(j.timers, m.seq)
		j.ntimers.Store(int64(len(j.timers)))
	}
	j.mu.Unlock()
	if ok {
		m.Attempts = max(m.Attempts, e.attempts)
		m.jrec = e.rec + 1
	}
}

// openJournal reads the journal a former run left: for each record of
// the Cursor and the timer store it names, the most attempts counted, and
// acknowledges the rest. An entry whose record the store's Cursor reports
// acknowledged goes too. With write, each entry that stays
// is written again and its old record acknowledged, so that the old
// records do not hold the journal's oldest segments for as long as their
// messages wait. A failed read of the journal is logged; what was read
// counts.
func (c *Channel) openJournal(store Store, write bool) {
	j := &journal{store: newSeqStore(store), write: write}
	c.jrn = j
	type target struct {
		store byte
		seq   uint64
	}
	best := map[target]journalEntry{}
	var stale []uint64
	bad := 0
	var readErr error
	for r, err := range j.store.records() {
		if err != nil {
			readErr = err
			break
		}
		rec := r.Seq
		st, seq, attempts, derr := decodeJournal(r.Body)
		if derr != nil {
			bad++
			stale = append(stale, rec)
			continue
		}
		t := target{st, seq}
		e, ok := best[t]
		switch {
		case !ok:
			best[t] = journalEntry{seq: seq, rec: rec, attempts: attempts}
		case attempts > e.attempts:
			stale = append(stale, e.rec)
			best[t] = journalEntry{seq: seq, rec: rec, attempts: attempts}
		default:
			stale = append(stale, rec)
		}
	}
	if readErr != nil {
		c.log.Warn("channel: cannot read the whole delivery journal; messages it did not reach may be delivered with fewer attempts counted", "err", readErr)
	}
	if bad > 0 {
		c.log.Warn("channel: dropping delivery journal records that do not decode", "records", bad)
	}
	for t, e := range best {
		var acked bool
		switch {
		case t.store == journalBackend:
			acked = c.src.Acknowledged(t.seq)
		case c.opts.Timers.Cursor == nil:
			acked = true // nothing reads that store now
		default:
			acked = c.opts.Timers.Cursor.Acknowledged(t.seq)
		}
		if acked {
			stale = append(stale, e.rec)
			continue
		}
		if write {
			if rec, ok := c.journalPut(t.store, t.seq, e.attempts); ok {
				stale = append(stale, e.rec)
				e.rec = rec
			}
		}
		if t.store == journalBackend {
			c.jBacklog = append(c.jBacklog, e)
			continue
		}
		if j.timers == nil {
			j.timers = map[uint64]journalEntry{}
		}
		j.timers[t.seq] = e
	}
	// After the new records: a crash in between leaves both, and the next
	// New keeps the one with the most attempts.
	for _, rec := range stale {
		c.journalAck(rec)
	}
	slices.SortFunc(c.jBacklog, func(a, b journalEntry) int { return cmp.Compare(a.seq, b.seq) })
	j.ntimers.Store(int64(len(j.timers)))
}

// journalEmpty discards the journal with the messages (Empty).
func (c *Channel) journalEmpty() error {
	j := c.jrn
	j.mu.Lock()
	clear(j.timers)
	j.ntimers.Store(0)
	j.mu.Unlock()
	return j.store.empty()
}
