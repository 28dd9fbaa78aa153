package channel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// syncTimers is a memStore whose Sync counts: records below durable are
// durable.
type syncTimers struct {
	*memStore
	durable atomic.Int64
	syncs   atomic.Int64
}

func (s *syncTimers) store() channel.Store {
	st := s.memStore.store()
	st.Log = syncCounting{st.Log, s}
	return st
}

type syncCounting struct {
	channel.Log
	s *syncTimers
}

func (l syncCounting) Sync(ctx context.Context) error {
	l.s.durable.Store(int64(l.s.written()))
	l.s.syncs.Add(1)
	return l.Log.Sync(ctx)
}

// moveCheckBackend is a memStore that, at each Ack, notes whether every
// record of timers was durable.
type moveCheckBackend struct {
	*memStore
	timers    *syncTimers
	premature atomic.Int64 // Acks made while a timer record was not durable
}

func (b *moveCheckBackend) store() channel.Store {
	st := b.memStore.store()
	st.Cursor = ackChecking{st.Cursor, b}
	return st
}

type ackChecking struct {
	channel.Cursor
	b *moveCheckBackend
}

func (c ackChecking) Ack(seq uint64) error {
	if c.b.timers.durable.Load() < int64(c.b.timers.written()) {
		c.b.premature.Add(1)
	}
	return c.Cursor.Ack(seq)
}

// TestMovedRecordAckedOnceDurable: a message moved to the timer store (a
// Requeue with a delay; a deferred record the pump meets) had its old
// record acknowledged at once, and the two stores sync on their own ticks
// (the kernel writes their pages back in any order): a power cut could
// keep the acknowledgement and lose the new record, losing a message put
// and fsynced long before (a review of the deferral paths). The old record
// is now acknowledged once the timer store has made the new one durable,
// one sync for the moves of a moment (settleDue, on the clock goroutine).
func TestMovedRecordAckedOnceDurable(t *testing.T) {
	ctx := context.Background()
	t.Run("requeue", func(t *testing.T) {
		s := &syncTimers{memStore: newMemStore()}
		b := &moveCheckBackend{memStore: newMemStore(), timers: s}
		c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		defer c.Close()
		put(t, c, "a")
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Requeue(time.Hour); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); b.Depth() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if b.Depth() != 0 {
			t.Fatal("the requeued message's old record was never acknowledged")
		}
		if p := b.premature.Load(); p != 0 || s.syncs.Load() == 0 {
			t.Errorf("the requeued message's old record was acknowledged before its timer record was durable (%d premature acks, %d syncs)", p, s.syncs.Load())
		}
	})
	t.Run("pump", func(t *testing.T) {
		// Deferred records in the backend: put by a channel without a
		// timer store, then read by one with.
		mb := newMemStore()
		c := newChannel(t, channel.Options{Backend: mb.store()})
		for i := range 40 {
			if err := c.PutWith(ctx, []byte(fmt.Sprint(i)), channel.PutOptions{Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		s := &syncTimers{memStore: newMemStore()}
		b := &moveCheckBackend{memStore: mb.reopen(), timers: s}
		c = newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		defer c.Close()
		deadline := time.Now().Add(10 * time.Second)
		for s.Depth() < 40 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if d := s.Depth(); d != 40 {
			t.Fatalf("%d of 40 deferred records moved to the timer store", d)
		}
		for b.Depth() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if p := b.premature.Load(); p != 0 {
			t.Errorf("%d old records acknowledged before their timer records were durable", p)
		}
		if n := s.syncs.Load(); n >= 40 {
			t.Errorf("%d syncs of the timer store for 40 moved records: one a record, not one a batch", n)
		}
	})
}

// TestMovedRecordSettledWithinItsWait: a move (its old record
// acknowledged after one sync of the timer store) is settled once it has
// waited its few milliseconds, by the clock goroutine on a due time of its
// own, not left to Close, a later acknowledgement (settleBefore) or the
// clock's next timeout scan (seconds away under the default MsgTimeout).
// In a synctest bubble, so the clock is fake and the wait exact.
func TestMovedRecordSettledWithinItsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &syncTimers{memStore: newMemStore()}
		b := newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		defer c.Close()
		put(t, c, "a")
		m := await(t, c)
		if err := m.Requeue(time.Hour); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if d := b.Depth(); d != 1 {
			t.Fatalf("backend depth %d at once after the move; want 1: its old record waits for the sync", d)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if d := b.Depth(); d != 0 {
			t.Fatalf("backend depth %d 10 ms after the move; want 0: settled by the clock", d)
		}
		if s.syncs.Load() == 0 {
			t.Fatal("old record acknowledged without a sync of the timer store")
		}
	})
}
