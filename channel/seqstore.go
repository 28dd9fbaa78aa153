package channel

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"sync"

	"github.com/spillq/spillq/diskqueue"
)

// numbers reports whether l numbers its records (see [Log]): ReadAt of
// the seq the next record gets finds nothing on a Log that does, and says
// ErrUnsupported on one that does not. It changes nothing either way.
func numbers(l Log) bool {
	_, err := l.ReadAt(l.NextSeq())
	return !errors.Is(err, errors.ErrUnsupported)
}

// checkStore refuses a Store with a Log and no Cursor, or the other way
// round; it reports whether s is set.
func checkStore(name string, s Store) (bool, error) {
	switch {
	case s.Log == nil && s.Cursor == nil:
		return false, nil
	case s.Log == nil || s.Cursor == nil:
		return false, fmt.Errorf("%w: %s needs both a Log and a Cursor", ErrInvalidOptions, name)
	}
	return true, nil
}

// seqStore is a Store the channel reads by seq rather than in turn: the
// timer store (read in due order) and the delivery journal (read once, at
// New). A Cursor acknowledges only what it has handed out, so ack first
// reads the cursor past the record: each record is read once that way, in
// batches, after it is last needed, which also passes the damaged ones.
type seqStore struct {
	log Log
	cur Cursor

	// mu serialises acks and Empty, which move the cursor; readNext is
	// the seq after the last record it handed out.
	mu       sync.Mutex
	readNext uint64
	buf      [64]diskqueue.Record
}

func newSeqStore(s Store) *seqStore {
	return &seqStore{log: s.Log, cur: s.Cursor, readNext: s.Cursor.Floor()}
}

// put stores body and returns its seq; an error as [Log.PutSeq]'s.
func (s *seqStore) put(ctx context.Context, body []byte) (uint64, error) {
	return s.log.PutSeq(ctx, body)
}

// get returns the body of record seq. An error for a record that can never
// be read (damaged, or gone) wraps ErrBadEnvelope: the channel drops it as
// a record that does not decode. Any other error is tried again.
func (s *seqStore) get(seq uint64) ([]byte, error) {
	rec, err := s.log.ReadAt(seq)
	if errors.Is(err, diskqueue.ErrCorrupt) || errors.Is(err, diskqueue.ErrNotFound) {
		return nil, errors.Join(ErrBadEnvelope, err)
	}
	return rec.Body, err
}

// ack acknowledges record seq, in any order.
func (s *seqStore) ack(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.readNext <= seq {
		n, err := s.cur.ReadBatch(doneCtx, s.buf[:])
		if err != nil {
			return fmt.Errorf("channel: reading the store up to seq %d: %w", seq, err)
		}
		s.readNext = s.buf[n-1].Seq + 1
		clear(s.buf[:n])
	}
	return s.cur.Ack(seq)
}

// records yields the records not acknowledged, in seq order, leaving out
// those that cannot be read back; an error that ends the iteration is
// yielded last.
func (s *seqStore) records() iter.Seq2[diskqueue.Record, error] {
	return func(yield func(diskqueue.Record, error) bool) {
		for rec, err := range s.cur.Unacknowledged(0, math.MaxUint64) {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				continue // never readable; the cursor passes it when read past
			}
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// empty discards every record.
func (s *seqStore) empty() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.cur.Empty()
	s.readNext = max(s.readNext, s.cur.Floor())
	return err
}

// closeStore releases the store (Store.Close), if it has a Close.
func closeStore(s Store) error {
	if s.Close == nil {
		return nil
	}
	return s.Close()
}

// syncLog makes what was put to l durable, reporting false when l cannot
// (nil, or its Sync unsupported): the caller then goes on as if it had.
func syncLog(ctx context.Context, l Log) (bool, error) {
	if l == nil {
		return false, nil
	}
	err := l.Sync(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	return true, err
}

// checkStores refuses, with ErrInvalidOptions, stores that cannot carry
// what the options ask of them, and learns whether the records the
// channel reads are numbered (c.numbered): those of its backend, or of its
// topic's log. c.backend, c.src and c.fan are set.
func (c *Channel) checkStores() error {
	o := c.opts
	timers, err := checkStore("Timers", o.Timers)
	if err != nil {
		return err
	}
	journal, err := checkStore("Deliveries", o.Deliveries)
	if err != nil {
		return err
	}
	switch {
	case c.backend != nil:
		c.numbered = numbers(c.backend)
	case c.fan != nil:
		c.numbered = c.fan.numbered
	}
	const unnumbered = "a Log that numbers its records (its ReadAt says errors.ErrUnsupported: the go-diskqueue adapter's does)"
	switch {
	case timers && c.src == nil:
		return fmt.Errorf("%w: Timers needs a Backend", ErrInvalidOptions)
	case journal && c.src == nil:
		return fmt.Errorf("%w: Deliveries needs a Backend", ErrInvalidOptions)
	case c.backend != nil && !c.numbered && (o.Keys == KeyUnique || o.Keys == KeyReplace || o.Keys == KeyDedup):
		return fmt.Errorf("%w: Keys %v names records by seq, and needs a Backend with %s", ErrInvalidOptions, o.Keys, unnumbered)
	case timers && !numbers(o.Timers.Log):
		return fmt.Errorf("%w: Timers needs %s", ErrInvalidOptions, unnumbered)
	case journal && !numbers(o.Deliveries.Log):
		return fmt.Errorf("%w: Deliveries needs %s", ErrInvalidOptions, unnumbered)
	case journal && !c.numbered:
		return fmt.Errorf("%w: Deliveries names the records it counts by seq, and needs a Backend with %s", ErrInvalidOptions, unnumbered)
	}
	return nil
}
