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
		c := newChannel(t, channel.Options{Backend: newMemBackend()})
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
// in the backend, behind a backlog or not, count as Deferred once the
// channel has read the backlog through, which it does without delivering
// anything; each counts once, whether the scan or the pump reads it first.
func TestDeferredAfterRestart(t *testing.T) {
	// With a short backlog the pump reads the deferred records back while
	// the scan is still going; with a long one, after it.
	for _, n := range []int{2, 10, 300} {
		for _, scanLate := range []bool{false, true} {
			t.Run(fmt.Sprintf("backlog=%d/scan-late=%v", n, scanLate), func(t *testing.T) { testDeferredAfterRestart(t, n, scanLate) })
		}
	}
}

// gatedScan is a memBackend whose backlog scan starts only once open is
// closed, so a test can have the pump read first.
type gatedScan struct {
	*memBackend
	open chan struct{}
}

func (g gatedScan) ScanBacklog() (uint64, func(yield func(uint64, []byte, error) bool)) {
	end, records := g.memBackend.ScanBacklog()
	return end, func(yield func(uint64, []byte, error) bool) {
		<-g.open
		records(yield)
	}
}

func testDeferredAfterRestart(t *testing.T, n int, scanLate bool) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemBackend()
		c := newChannel(t, channel.Options{Backend: b})
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

		gate := gatedScan{b.reopen(), make(chan struct{})}
		if !scanLate {
			close(gate.open)
		}
		c = newChannel(t, channel.Options{Backend: gate})
		defer c.Close()
		if scanLate {
			synctest.Wait() // the pump has read what it can
			close(gate.open)
		}
		synctest.Wait() // the backlog has been read through
		checkCounts(t, c, d+2, int64(n-2))
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
			c := newChannel(t, channel.Options{MemQueueSize: mem, Backend: newMemBackend()})
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
