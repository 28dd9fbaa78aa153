package logtest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/diskqueue/logtest"
)

// The suite against a reference store written from the interfaces' docs
// alone, to show it assumes nothing of diskqueue's: it starts at seq
// 1000, drops acknowledged records at once, and has any number of
// cursors and no storage to reopen.
func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
		l := newRefLog(1000, cfg)
		return logtest.Store{
			Store:     channel.Store{Log: l, Cursor: l.newCursor(), Close: l.close},
			NewCursor: func(*testing.T, string) channel.Cursor { return l.newCursor() },
		}
	})
}

// The suite against the least a store may be: one cursor, nothing to
// close, and every method that may be unsupported unsupported.
func TestConformanceMinimal(t *testing.T) {
	logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
		l := newRefLog(0, cfg)
		m := minimal{l}
		return logtest.Store{Store: channel.Store{Log: m, Cursor: minimalCursor{l.newCursor()}}}
	})
}

// refLog is a Log in memory, all under one mutex.
type refLog struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when a record is put, given back, or the log closes
	base     uint64        // seq of bodies[0]
	bodies   [][]byte
	cursors  []*refCursor
	closed   bool
	min, max int
}

func newRefLog(base uint64, cfg logtest.Config) *refLog {
	return &refLog{changed: make(chan struct{}), base: base, min: cfg.MinRecordBytes, max: cfg.MaxRecordBytes}
}

func (l *refLog) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *refLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return channel.ErrClosed
	}
	l.closed = true
	l.notifyLocked()
	return nil
}

func (l *refLog) nextLocked() uint64 { return l.base + uint64(len(l.bodies)) }

func (l *refLog) check(body []byte) error {
	switch {
	case len(body) > l.max:
		return fmt.Errorf("ref: %d bytes: %w", len(body), diskqueue.ErrRecordTooLarge)
	case len(body) < l.min:
		return fmt.Errorf("ref: %d bytes: %w", len(body), diskqueue.ErrRecordTooSmall)
	}
	return nil
}

func (l *refLog) Put(ctx context.Context, body []byte) error {
	_, err := l.PutSeq(ctx, body)
	return err
}

func (l *refLog) PutSeq(ctx context.Context, body []byte) (uint64, error) {
	seq, n, err := l.put(ctx, [][]byte{body})
	if n == 0 {
		return 0, err
	}
	return seq, err
}

func (l *refLog) PutBatch(ctx context.Context, bodies [][]byte) (int, error) {
	_, n, err := l.put(ctx, bodies)
	return n, err
}

// put appends a prefix of bodies and returns the first one's seq.
func (l *refLog) put(ctx context.Context, bodies [][]byte) (first uint64, n int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, 0, channel.ErrClosed
	}
	first = l.nextLocked()
	for _, b := range bodies {
		if err = l.check(b); err != nil {
			break
		}
		l.bodies = append(l.bodies, slices.Clone(b))
		n++
	}
	if n > 0 {
		l.notifyLocked()
	}
	return first, n, err
}

func (l *refLog) NextSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextLocked()
}

func (l *refLog) floorLocked() uint64 {
	f := l.nextLocked()
	for _, c := range l.cursors {
		f = min(f, c.floor)
	}
	return f
}

func (l *refLog) Floor() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.floorLocked()
}

func (l *refLog) Acknowledged(seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq >= l.nextLocked() {
		return false
	}
	for _, c := range l.cursors {
		if !c.ackedLocked(seq) {
			return false
		}
	}
	return true
}

// retainedLocked: a record every cursor acknowledged is gone at once.
func (l *refLog) retainedLocked(seq uint64) bool {
	if seq < l.base || seq >= l.nextLocked() {
		return false
	}
	for _, c := range l.cursors {
		if !c.ackedLocked(seq) {
			return true
		}
	}
	return len(l.cursors) == 0
}

func (l *refLog) ReadAt(seq uint64) (diskqueue.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.retainedLocked(seq) {
		return diskqueue.Record{}, fmt.Errorf("ref: seq %d: %w", seq, diskqueue.ErrNotFound)
	}
	return diskqueue.Record{Seq: seq, Body: slices.Clone(l.bodies[seq-l.base])}, nil
}

func (l *refLog) Scan(from, to uint64) iter.Seq2[diskqueue.Record, error] {
	return l.scan(from, to, l.retainedLocked)
}

// scan yields the records in [from, to) keep says, looked at one at a
// time under the lock, yielded outside it.
func (l *refLog) scan(from, to uint64, keep func(uint64) bool) iter.Seq2[diskqueue.Record, error] {
	return func(yield func(diskqueue.Record, error) bool) {
		for seq := max(from, l.base); seq < to; seq++ {
			l.mu.Lock()
			if seq >= l.nextLocked() {
				l.mu.Unlock()
				return
			}
			ok := keep(seq)
			var body []byte
			if ok {
				body = slices.Clone(l.bodies[seq-l.base])
			}
			l.mu.Unlock()
			if ok && !yield(diskqueue.Record{Seq: seq, Body: body}, nil) {
				return
			}
		}
	}
}

func (l *refLog) Sync(context.Context) error { return nil }
func (l *refLog) MaxRecordBytes() int        { return l.max }
func (l *refLog) MinRecordBytes() int        { return l.min }

// refCursor is a Cursor on a refLog; its fields are guarded by the log's
// mu.
type refCursor struct {
	l        *refLog
	floor    uint64          // every seq below is acknowledged
	next     uint64          // next seq to hand out
	acked    map[uint64]bool // acknowledged at or above floor
	back     []diskqueue.Record
	emptied  uint64 // every seq below was discarded by Empty, if handed out
	inFlight map[uint64]bool
}

func (l *refLog) newCursor() *refCursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.nextLocked()
	c := &refCursor{l: l, floor: next, next: next, acked: map[uint64]bool{}, inFlight: map[uint64]bool{}}
	l.cursors = append(l.cursors, c)
	return c
}

func (c *refCursor) ackedLocked(seq uint64) bool {
	return seq < c.floor || c.acked[seq]
}

func (c *refCursor) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	l := c.l
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return 0, channel.ErrClosed
		}
		n := 0
		for ; n < len(dst) && len(c.back) > 0; n++ {
			dst[n], c.back = c.back[0], c.back[1:]
		}
		for ; n < len(dst) && c.next < l.nextLocked(); n++ {
			dst[n] = diskqueue.Record{Seq: c.next, Body: slices.Clone(l.bodies[c.next-l.base])}
			c.inFlight[c.next] = true
			c.next++
		}
		wait := l.changed
		l.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-wait:
		}
	}
}

func (c *refCursor) Ack(seq uint64) error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if !c.inFlight[seq] {
		return fmt.Errorf("ref: seq %d: %w", seq, diskqueue.ErrNotInFlight)
	}
	delete(c.inFlight, seq)
	c.acked[seq] = true
	for c.acked[c.floor] {
		delete(c.acked, c.floor)
		c.floor++
	}
	return nil
}

func (c *refCursor) Acknowledged(seq uint64) bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return seq < c.l.nextLocked() && c.ackedLocked(seq)
}

func (c *refCursor) Floor() uint64 {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.floor
}

func (c *refCursor) Depth() int64 {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return int64(c.l.nextLocked()-c.floor) - int64(len(c.acked))
}

func (c *refCursor) Passed() int64 { return 0 }

func (c *refCursor) Empty() error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.floor = c.l.nextLocked()
	c.next, c.emptied = c.floor, c.floor
	clear(c.acked)
	clear(c.inFlight)
	c.back = nil
	return nil
}

func (c *refCursor) Unread(recs []diskqueue.Record) error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	for _, r := range recs {
		if !c.inFlight[r.Seq] {
			return fmt.Errorf("ref: unread seq %d: %w", r.Seq, diskqueue.ErrNotInFlight)
		}
		i, _ := slices.BinarySearchFunc(c.back, r.Seq, func(b diskqueue.Record, seq uint64) int { return cmp.Compare(b.Seq, seq) })
		c.back = slices.Insert(c.back, i, r)
	}
	c.l.notifyLocked()
	return nil
}

func (c *refCursor) Discarded(seq uint64) bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return seq < c.emptied
}

func (c *refCursor) Unacknowledged(from, to uint64) iter.Seq2[diskqueue.Record, error] {
	return c.l.scan(from, to, func(seq uint64) bool { return !c.ackedLocked(seq) })
}

// minimal is a refLog with every optional method unsupported.
type minimal struct{ *refLog }

var errNo = fmt.Errorf("minimal store: %w", errors.ErrUnsupported)

func (minimal) PutSeq(context.Context, []byte) (uint64, error)         { return 0, errNo }
func (minimal) PutBatch(context.Context, [][]byte) (int, error)        { return 0, errNo }
func (minimal) ReadAt(uint64) (diskqueue.Record, error)                { return diskqueue.Record{}, errNo }
func (minimal) Sync(context.Context) error                             { return errNo }
func (minimal) Scan(uint64, uint64) iter.Seq2[diskqueue.Record, error] { return failing }

type minimalCursor struct{ *refCursor }

func (minimalCursor) Empty() error                    { return errNo }
func (minimalCursor) Unread([]diskqueue.Record) error { return errNo }
func (minimalCursor) Unacknowledged(uint64, uint64) iter.Seq2[diskqueue.Record, error] {
	return failing
}

func failing(yield func(diskqueue.Record, error) bool) { yield(diskqueue.Record{}, errNo) }
