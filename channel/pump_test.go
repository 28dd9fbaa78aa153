package channel_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// batchBackend is a memStore whose reads wait until open is closed: what
// is put before then is read in one batch.
type batchBackend struct {
	*memStore
	open chan struct{}
}

func (b *batchBackend) store() channel.Store {
	s := b.memStore.store()
	s.Cursor = gatedReads{s.Cursor, b.open}
	return s
}

type gatedReads struct {
	channel.Cursor
	open chan struct{}
}

func (c gatedReads) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	select {
	case <-c.open:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return c.Cursor.ReadBatch(ctx, dst)
}

// A batch the pump hands over at once reaches every receiver waiting, not
// only the one woken first.
func TestBatchReachesEveryWaitingReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const receivers = 4
		b := &batchBackend{memStore: newMemStore(), open: make(chan struct{})}
		c := newChannel(t, channel.Options{Backend: b.store()})
		defer c.Close()
		got := make(chan *channel.Message, receivers)
		for range receivers {
			go func() {
				// Each takes one message and holds it: the others must be
				// woken by whoever was woken first, or by the pump. On the
				// bubble's clock, a receiver left waiting times out as
				// soon as everything else is blocked.
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				m, err := c.Receive(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- m
			}()
		}
		synctest.Wait() // every receiver is waiting
		put(t, c, seq(receivers)...)
		close(b.open)
		seen := map[string]bool{}
		for range receivers {
			m := <-got
			if m == nil {
				continue
			}
			seen[string(m.Body)] = true
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		if len(seen) != receivers {
			t.Fatalf("%d receivers got %d distinct messages: %v", receivers, len(seen), seen)
		}
	})
}

// More than the read-ahead holds, in batches: the receiver reads past
// the read-ahead itself, batch after batch, and put order holds across
// them.
func TestReadAheadFullKeepsOrder(t *testing.T) {
	const n = 1000
	b := &batchBackend{memStore: newMemStore(), open: make(chan struct{})}
	close(b.open)
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	want := seq(n)
	put(t, c, want...)
	for i := range n {
		m := receive(t, c)
		if string(m.Body) != want[i] {
			t.Fatalf("message %d: got %q, want %q", i, m.Body, want[i])
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	if d := c.Depth(); d != 0 {
		t.Fatalf("Depth %d after draining", d)
	}
}

// Two receivers draining a backlog larger than the read-ahead get each
// message once, however the pump's batches and their wake-ups interleave.
func TestReadAheadTwoReceiversEachMessageOnce(t *testing.T) {
	const n = 2000
	b := &batchBackend{memStore: newMemStore(), open: make(chan struct{})}
	close(b.open)
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				seen[string(m.Body)]++
				done := len(seen) == n
				mu.Unlock()
				if err := m.Finish(); err != nil {
					t.Error(err)
				}
				if done {
					cancel()
				}
			}
		}()
	}
	put(t, c, seq(n)...)
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("got %d distinct messages of %d", len(seen), n)
	}
	for body, k := range seen {
		if k != 1 {
			t.Fatalf("message %q delivered %d times", body, k)
		}
	}
}

// countedReads is a Cursor that counts the reads that returned records:
// the pump's, made with a ctx that may wait, and those made with a done
// ctx, a receiver's own.
type countedReads struct {
	channel.Cursor
	pump, direct *atomic.Int64
}

func (c countedReads) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	direct := ctx.Err() != nil
	n, err := c.Cursor.ReadBatch(ctx, dst)
	if n > 0 {
		if direct {
			c.direct.Add(1)
		} else {
			c.pump.Add(1)
		}
	}
	return n, err
}

// A receiver that finds nothing ready reads the backend itself: a backlog
// drains without a hand-off from the pump, which, once the read-ahead has
// no room for a batch, reads again only for receivers that wait.
func TestReceiverReadsTheBacklogItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 128 + 2*32 + 5 // more than the read-ahead holds
		st := newMemStore().store()
		var pump, direct atomic.Int64
		st.Cursor = countedReads{st.Cursor, &pump, &direct}
		c := newChannel(t, channel.Options{Backend: st})
		defer c.Close()
		want := seq(n)
		put(t, c, want...)
		synctest.Wait() // the pump has filled the read-ahead, and waits to be asked
		for i := range n {
			m, err := c.TryReceive()
			if err != nil {
				t.Fatalf("TryReceive %d: %v", i, err)
			}
			if string(m.Body) != want[i] {
				t.Fatalf("message %d: got %q, want %q", i, m.Body, want[i])
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		if d := direct.Load(); d == 0 {
			t.Fatalf("the pump read %d times and the receiver never: want the receiver to read what the read-ahead did not hold", pump.Load())
		}
	})
}

// A read that leaves nothing for consumers (deferred records, here whole
// batches of them) does not end the pump's errand: the receiver that
// asked gets the message put after them, not a deferred one when it comes
// due.
func TestPumpReadsOnPastDeferredRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &batchBackend{memStore: newMemStore(), open: make(chan struct{})}
		c := newChannel(t, channel.Options{Backend: b.store()})
		defer c.Close()
		got := make(chan *channel.Message, 1)
		go func() { got <- await(t, c) }()
		synctest.Wait() // the receiver waits, and has asked once for a read
		// Two full batches: the request is used up by the read of the
		// first, if the pump needed one to read the second.
		for i := range 2 * 32 {
			if err := c.PutWith(context.Background(), fmt.Appendf(nil, "later%d", i), channel.PutOptions{Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		close(b.open)
		synctest.Wait() // read and deferred
		put(t, c, "now")
		if m := <-got; string(m.Body) != "now" {
			t.Fatalf("got %q, want %q", m.Body, "now")
		}
	})
}
