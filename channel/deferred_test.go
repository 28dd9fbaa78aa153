package channel_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// putBacklog puts n messages and then d deferred by an hour, with no
// consumer, so the deferred ones sit in the backend behind more messages
// than the channel reads ahead.
func putBacklog(t *testing.T, c *channel.Channel, n, d int) {
	t.Helper()
	put(t, c, seq(n)...)
	for i := 0; i < d; i++ {
		if err := c.PutWith(context.Background(), []byte(fmt.Sprintf("later%d", i)), channel.PutOptions{Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}

func checkCounts(t *testing.T, c *channel.Channel, deferred int, waiting int64) {
	t.Helper()
	st := c.Stats()
	if st.Deferred != deferred || st.DiskDepth != waiting || c.Depth() != waiting {
		t.Fatalf("Deferred %d, DiskDepth %d, Depth %d; want %d deferred and %d waiting", st.Deferred, st.DiskDepth, c.Depth(), deferred, waiting)
	}
}

// TestDeferredBehindABacklog: deferred messages stored in the backend
// behind a backlog count as Deferred, not as waiting in DiskDepth or
// Depth, before and after the channel reads them back.
func TestDeferredBehindABacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{Backend: newMemStore().store()})
		defer c.Close()
		const n, d = 300, 5
		putBacklog(t, c, n, d)
		synctest.Wait()
		checkCounts(t, c, d, n)
		for i := 0; i < n; i++ {
			receive(t, c).Finish()
		}
		synctest.Wait() // the pump reads the deferred records back
		checkCounts(t, c, d, 0)
		if st := c.Stats(); st.BackendDepth != d {
			t.Fatalf("BackendDepth %d, want the %d deferred records", st.BackendDepth, d)
		}
	})
}

// TestDeferredAfterRestart: after a restart the deferred messages already
// in the backend count in DiskDepth until the channel reads them (New does
// not read the backlog for them), and as Deferred from then on, each once.
func TestDeferredAfterRestart(t *testing.T) {
	// With a short backlog the pump reads the deferred records at once;
	// with a long one, only once consumers have taken what stands before.
	for _, n := range []int{2, 10, 300} {
		t.Run(fmt.Sprintf("backlog=%d", n), func(t *testing.T) { testDeferredAfterRestart(t, n) })
	}
}

func testDeferredAfterRestart(t *testing.T, n int) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store()})
		const d = 5
		putBacklog(t, c, n, d)
		// And two deferred in memory, which Close writes to the backend.
		m := receive(t, c)
		m.Requeue(time.Hour)
		m = receive(t, c)
		m.Requeue(time.Hour)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}

		c = newChannel(t, channel.Options{Backend: b.reopen().store()})
		defer c.Close()
		synctest.Wait() // the pump has read what it can
		if n+d+2 <= 128 {
			checkCounts(t, c, d+2, int64(n-2))
		} else {
			// The read-ahead is full before the deferred records.
			checkCounts(t, c, 0, int64(n+d))
		}
		for i := 0; i < n-2; i++ {
			receive(t, c).Finish()
		}
		synctest.Wait()
		checkCounts(t, c, d+2, 0)
		if err := c.Empty(); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, c, 0, 0)
	})
}

// TestFarFutureTimes: an Expires past the year 2262 (a "never" of 9999)
// or a Delay reaching past it overflowed the message's int64 nanoseconds:
// the message expired at once, or was delivered at once.
func TestFarFutureTimes(t *testing.T) {
	for _, mem := range []int{0, 10} {
		t.Run(fmt.Sprintf("MemQueueSize=%d", mem), func(t *testing.T) {
			c := newChannel(t, channel.Options{MemQueueSize: mem, Backend: newMemStore().store()})
			defer c.Close()
			ctx := context.Background()
			never := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
			if err := c.PutWith(ctx, []byte("expires in 9999"), channel.PutOptions{Expires: never}); err != nil {
				t.Fatal(err)
			}
			if err := c.PutWith(ctx, []byte("delayed 292 years"), channel.PutOptions{Delay: math.MaxInt64}); err != nil {
				t.Fatal(err)
			}
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Body) != "expires in 9999" {
				t.Fatalf("received %q first, want the one that expires in 9999", m.Body)
			}
			if err := m.Requeue(math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if m, err := c.Receive(rctx); err == nil {
				t.Fatalf("received %q, deferred for 292 years", m.Body)
			}
			if st := c.Stats(); st.Expired != 0 || st.DeadLetters != 0 || st.Deferred != 2 {
				t.Errorf("Stats: %d expired, %d dead letters, %d deferred; want 0, 0 and 2", st.Expired, st.DeadLetters, st.Deferred)
			}
		})
	}
}
