package channel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// TestTimersOptions: a timer store needs a backend, and the bound cannot
// be negative.
func TestTimersOptions(t *testing.T) {
	if _, err := channel.New(channel.Options{Timers: newMemStore().store()}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("Timers without a Backend: %v", err)
	}
	if _, err := channel.New(channel.Options{Backend: newMemStore().store(), MaxDeferredInMemory: -1}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("negative MaxDeferredInMemory: %v", err)
	}
}

// TestTimersHoldNoBackendRecord: with a timer store, a message put with a
// delay never reaches the backend, and one requeued with a delay leaves it
// (its record there acknowledged); each keeps its attempts and due time
// across a restart, in the timer store alone.
func TestTimersHoldNoBackendRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, s := newMemStore(), newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		ctx := context.Background()
		start := time.Now()
		c.PutWith(ctx, []byte("put later"), channel.PutOptions{Delay: time.Hour})
		put(t, c, "requeue me")
		m := await(t, c)
		if err := m.Requeue(2 * time.Hour); err != nil {
			t.Fatal(err)
		}
		// The old record is acknowledged a moment later, once the timer
		// store has synced the new one (moveSettleWait).
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if st := c.Stats(); b.Depth() != 0 || s.Depth() != 2 || st.Deferred != 2 || st.BackendDepth != 0 {
			t.Fatalf("backend %d records, timer store %d, %d deferred; want 0, 2, 2", b.Depth(), s.Depth(), st.Deferred)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		b, s = b.reopen(), s.reopen()
		c = newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		defer c.Close()
		synctest.Wait()
		if st := c.Stats(); st.Deferred != 2 || c.Depth() != 0 {
			t.Fatalf("after restart: %d deferred, depth %d", st.Deferred, c.Depth())
		}
		m = await(t, c)
		if string(m.Body) != "put later" || time.Since(start) < time.Hour || m.Attempts != 1 {
			t.Fatalf("got %q attempt %d after %v", m.Body, m.Attempts, time.Since(start))
		}
		// Deferred again from the timer store: a new record, the old one
		// acknowledged.
		if err := m.Requeue(time.Hour); err != nil {
			t.Fatal(err)
		}
		m = await(t, c)
		if string(m.Body) != "requeue me" || time.Since(start) < 2*time.Hour || m.Attempts != 2 {
			t.Fatalf("got %q attempt %d after %v", m.Body, m.Attempts, time.Since(start))
		}
		m.Finish()
		m = await(t, c)
		if string(m.Body) != "put later" || time.Since(start) < 2*time.Hour || m.Attempts != 2 {
			t.Fatalf("got %q attempt %d after %v", m.Body, m.Attempts, time.Since(start))
		}
		m.Finish()
		if st := c.Stats(); s.Depth() != 0 || b.Depth() != 0 || st.Deferred != 0 {
			t.Fatalf("all finished, yet timer store %d, backend %d, %d deferred", s.Depth(), b.Depth(), st.Deferred)
		}
	})
}

// TestTimersCloseKeepsReleased: messages released from the timer store
// and not finished at Close (ready or in flight) go to the backend with
// their attempts; their timer records go.
func TestTimersCloseKeepsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, s := newMemStore(), newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		ctx := context.Background()
		for _, body := range []string{"a", "b"} {
			c.PutWith(ctx, []byte(body), channel.PutOptions{Delay: time.Minute})
		}
		m := await(t, c) // in flight at Close
		time.Sleep(time.Minute)
		synctest.Wait() // the other is ready
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if s.Depth() != 0 || b.Depth() != 2 {
			t.Fatalf("after Close: timer store %d, backend %d; want 0 and 2", s.Depth(), b.Depth())
		}
		c = newChannel(t, channel.Options{Backend: b.reopen().store(), Timers: s.reopen().store()})
		defer c.Close()
		got := map[string]uint16{}
		for i := 0; i < 2; i++ {
			m := await(t, c)
			got[string(m.Body)] = m.Attempts
			m.Finish()
		}
		if got[string(m.Body)] != 2 || len(got) != 2 {
			t.Fatalf("after restart got %v; want a and b, %q on its second attempt", got, m.Body)
		}
	})
}

// TestTimersFallBackToMemory: when the timer store refuses, a delayed Put
// goes to the backend and a delayed Requeue stays in memory, as without a
// timer store; both are delivered when due and counted as deferred.
func TestTimersFallBackToMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, s := newMemStore(), newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store()})
		defer c.Close()
		ctx := context.Background()
		start := time.Now()
		put(t, c, "requeued")
		m := await(t, c)
		s.failPut.Store(true)
		if err := c.PutWith(ctx, []byte("put"), channel.PutOptions{Delay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := m.Requeue(time.Minute); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := c.Stats(); st.Deferred != 2 || b.Depth() != 2 {
			t.Fatalf("%d deferred, backend %d; want 2 and 2 (held in memory, records kept)", st.Deferred, b.Depth())
		}
		for i := 0; i < 2; i++ {
			m := await(t, c)
			if time.Since(start) < time.Minute {
				t.Fatalf("%q delivered after %v", m.Body, time.Since(start))
			}
			m.Finish()
		}
		if b.Depth() != 0 || s.Depth() != 0 {
			t.Fatalf("backend %d, timer store %d", b.Depth(), s.Depth())
		}
	})
}

// TestTimersEmpty: Empty discards the deferred messages in the timer store
// too, those tracked in memory and those not.
func TestTimersEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, s := newMemStore(), newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store(), MaxDeferredInMemory: 4})
		defer c.Close()
		ctx := context.Background()
		for i := 0; i < 20; i++ {
			c.PutWith(ctx, []byte("x"), channel.PutOptions{Delay: time.Duration(i+1) * time.Minute})
		}
		if err := c.Empty(); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Deferred != 0 || s.Depth() != 0 {
			t.Fatalf("after Empty: %d deferred, timer store %d", st.Deferred, s.Depth())
		}
		c.PutWith(ctx, []byte("after"), channel.PutOptions{Delay: time.Hour})
		if m := await(t, c); string(m.Body) != "after" {
			t.Fatalf("got %q", m.Body)
		}
	})
}

// TestTimersRace: producers and consumers defer and requeue with short
// delays against a bound of 8 timers in memory, so refills of the timer
// store run all the time beside puts, releases and acknowledgements (run
// it with -race). Every message is finished exactly once, none delivered
// before it is due, and nothing is left.
func TestTimersRace(t *testing.T) {
	b, s := newMemStore(), newMemStore()
	c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store(), MaxDeferredInMemory: 8})
	defer c.Close()
	const producers, each = 4, 300
	ctx := context.Background()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var po channel.PutOptions
				if i%3 != 0 {
					po.Delay = time.Duration(rand.IntN(20)) * time.Millisecond
				}
				if err := c.PutWith(ctx, []byte(fmt.Sprintf("%d-%d", p, i)), po); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	finished := map[string]int{}
	var due sync.Map // body -> time.Time it may be delivered from, for requeues
	for k := 0; k < 3; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				n := len(finished)
				mu.Unlock()
				if n == producers*each {
					return
				}
				wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				m, err := c.Receive(wait)
				cancel()
				if err != nil {
					continue
				}
				if d, ok := due.Load(string(m.Body)); ok && time.Now().Before(d.(time.Time)) {
					t.Errorf("%s delivered %v early", m.Body, time.Until(d.(time.Time)))
				}
				if m.Attempts < 3 && rand.IntN(2) == 0 {
					d := time.Duration(1+rand.IntN(10)) * time.Millisecond
					// Wall-clock, as the channel's due times are
					// (Round(0) drops the monotonic reading).
					due.Store(string(m.Body), time.Now().Round(0).Add(d))
					m.Requeue(d)
					continue
				}
				mu.Lock()
				finished[string(m.Body)]++
				mu.Unlock()
				if err := m.Finish(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for k, n := range finished {
		if n != 1 {
			t.Fatalf("%s finished %d times", k, n)
		}
	}
	if st := c.Stats(); st.Deferred != 0 || s.Depth() != 0 || b.Depth() != 0 {
		t.Fatalf("left: %d deferred, timer store %d, backend %d", st.Deferred, s.Depth(), b.Depth())
	}
	ts := c.TimerStats()
	if ts.InMemory > 8 || ts.Released != 0 || ts.Fallback != 0 {
		t.Fatalf("timer stats at the end: %+v", ts)
	}
	t.Logf("%d messages; %d reads of the timer store, %d records read", producers*each, ts.Refills, ts.Scanned)
}

// TestSerialInPlaceRequeuesBounded: under KeySerial a message requeued
// with a delay waits in memory with its record in place (so a restart keeps
// its key's order), each whole in memory: at most MaxDeferredInMemory of
// them, the rest going to the timer store as before (a review noted there
// was no bound).
func TestSerialInPlaceRequeuesBounded(t *testing.T) {
	b, s := newMemStore(), newMemStore()
	c := newChannel(t, channel.Options{Backend: b.store(), Timers: s.store(), Keys: channel.KeySerial, MaxDeferredInMemory: 2})
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := c.PutWith(ctx, []byte(k), channel.PutOptions{Key: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Requeue(time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); b.Depth() > 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if sd, bd := s.Depth(), b.Depth(); sd != 1 || bd != 2 {
		t.Errorf("3 requeued with a delay, MaxDeferredInMemory 2: %d in the timer store and %d records kept in the backend, want 1 and 2", sd, bd)
	}
}

// notDurableTimers is a memStore whose Put stores the record and says it
// is not durable yet, as a disk timer store under SyncEvery 1 does when
// the Put's ctx ends during its fsync.
type notDurableTimers struct{ *memStore }

func (s notDurableTimers) store() channel.Store { return notDurableBackend(s).store() }

// TestTimerStoreNotDurable: a timer store's Put that stored its record
// but returned ErrNotDurable is a record stored. A Requeue with a delay
// kept the message in memory as well (delivered twice), and Close stored
// a deferred message held in memory in the backend too (two live copies
// after a restart), as for a Put that failed (a review found both).
func TestTimerStoreNotDurable(t *testing.T) {
	ctx := context.Background()
	timers := notDurableTimers{newMemStore()}
	c, err := channel.New(channel.Options{Backend: newMemStore().store(), Timers: timers.store()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, []byte("m")); err != nil {
		t.Fatal(err)
	}
	m := receive(t, c)
	if err := m.Requeue(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	m = receive(t, c)
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if m, err := c.Receive(short); err == nil {
		t.Fatalf("%q delivered again after it was finished", m.Body)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := timers.live(); n != 0 {
		t.Fatalf("%d timer records left after the message was finished", n)
	}
}
