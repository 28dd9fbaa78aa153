package channel_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newChannel(t *testing.T, o channel.Options) *channel.Channel {
	t.Helper()
	c, err := channel.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t *testing.T, c *channel.Channel, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if err := c.Put(context.Background(), []byte(b)); err != nil {
			t.Fatalf("Put %q: %v", b, err)
		}
	}
}

func receive(t *testing.T, c *channel.Channel) *channel.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return m
}

// await receives with no deadline, for synctest bubbles, where a wait that
// can never end is reported as a deadlock instead of hanging.
func await(t *testing.T, c *channel.Channel) *channel.Message {
	t.Helper()
	m, err := c.Receive(context.Background())
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return m
}

func seq(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m%04d", i)
	}
	return out
}

func TestMemoryOnly(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 100})
	defer c.Close()
	put(t, c, seq(100)...)
	if got := c.Depth(); got != 100 {
		t.Fatalf("Depth %d, want 100", got)
	}
	for _, want := range seq(100) {
		m := receive(t, c)
		if string(m.Body) != want || m.Attempts != 1 {
			t.Fatalf("got %q attempt %d, want %q attempt 1", m.Body, m.Attempts, want)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if st.Finishes != 100 || st.InFlight != 0 || st.Spills != 0 || st.LatencyP50 == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLatencyCountsEveryFinish: with a backlog only some finishes are
// timed, but the histogram still counts every one, and Puts counts every
// message put (failures aside).
func TestLatencyCountsEveryFinish(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 1000})
	defer c.Close()
	put(t, c, seq(1000)...)
	for range 1000 {
		if err := receive(t, c).Finish(); err != nil {
			t.Fatal(err)
		}
	}
	_, counts := c.LatencyBuckets()
	var total uint64
	for _, n := range counts {
		total += n
	}
	st := c.Stats()
	if total != 1000 || st.Finishes != 1000 || st.Puts != 1000 {
		t.Fatalf("histogram holds %d, Finishes %d, Puts %d; want 1000 each", total, st.Finishes, st.Puts)
	}
	c.Close()
	if err := c.Put(context.Background(), []byte("late")); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if st := c.Stats(); st.Puts != 1000 {
		t.Fatalf("a failed Put was counted: Puts %d", st.Puts)
	}
}

// TestSpillKeepsOrder: a producer faster than its consumer fills memory;
// the rest spills; the consumer sees put order across the spill.
func TestSpillKeepsOrder(t *testing.T) {
	b := newMemStore()
	c := newChannel(t, channel.Options{MemQueueSize: 10, Backend: b.store()})
	defer c.Close()
	const n = 2000
	// Put ahead of the consumer, enough to spill whichever goroutine is
	// faster afterwards: a consumer that kept up with the producer would
	// leave nothing to spill.
	const first = 15
	put(t, c, seq(first)...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := first; i < n; i++ {
			if err := c.Put(context.Background(), []byte(fmt.Sprintf("m%04d", i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < n; i++ {
		m := receive(t, c)
		if want := fmt.Sprintf("m%04d", i); string(m.Body) != want {
			t.Fatalf("message %d: got %q", i, m.Body)
		}
		m.Finish()
	}
	<-done
	st := c.Stats()
	if st.Spills == 0 {
		t.Fatal("nothing spilled: the test did not exercise the spill")
	}
	if st.BackendDepth != 0 {
		t.Fatalf("backend holds %d records after everything was finished", st.BackendDepth)
	}
}

func TestAllThroughBackend(t *testing.T) {
	b := newMemStore()
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	put(t, c, "a", "b")
	if st := c.Stats(); st.Spills != 2 || st.MemoryDepth != 0 {
		t.Fatalf("MemQueueSize 0 with a backend: %+v", st)
	}
	m := receive(t, c)
	if b.Depth() != 2 {
		t.Fatal("a record was acknowledged before Finish")
	}
	m.Finish()
	if b.Depth() != 1 {
		t.Fatal("Finish did not acknowledge the backend record")
	}
}

func TestCloseFlushesAndRestartDelivers(t *testing.T) {
	b := newMemStore()
	c := newChannel(t, channel.Options{MemQueueSize: 5, Backend: b.store()})
	put(t, c, seq(8)...) // 5 in memory, 3 spilled
	inflight := receive(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inflight.Finish(); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Finish after Close: got %v, want ErrClosed", err)
	}
	c = newChannel(t, channel.Options{MemQueueSize: 5, Backend: b.reopen().store()})
	defer c.Close()
	got := map[string]int{}
	for i := 0; i < 8; i++ {
		m := receive(t, c)
		got[string(m.Body)]++
		// Close cut its first delivery short: not spent.
		if string(m.Body) == "m0000" && m.Attempts != 1 {
			t.Fatalf("in-flight message came back with attempts %d, want 1", m.Attempts)
		}
		m.Finish()
	}
	for _, want := range seq(8) {
		if got[want] != 1 {
			t.Fatalf("after restart %q delivered %d times", want, got[want])
		}
	}
}

func TestTimeoutRedelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 10, MsgTimeout: time.Second})
		defer c.Close()
		put(t, c, "job")
		first := await(t, c)
		// The consumer dies: no Finish. After the timeout the message is
		// delivered again, and the old handle is no longer in flight.
		second := await(t, c)
		if second.ID != first.ID || second.Attempts != 2 {
			t.Fatalf("redelivery: got %s attempt %d", second.ID, second.Attempts)
		}
		if err := first.Finish(); !errors.Is(err, channel.ErrNotInFlight) {
			t.Fatalf("Finish of the timed-out handle: got %v", err)
		}
		if err := second.Finish(); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Timeouts != 1 {
			t.Fatalf("Timeouts %d", st.Timeouts)
		}
	})
}

func TestTouchExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 10, MsgTimeout: time.Second})
		defer c.Close()
		put(t, c, "slow job")
		m := await(t, c)
		for i := 0; i < 5; i++ {
			time.Sleep(800 * time.Millisecond) // virtual time
			if err := m.Touch(); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Finish(); err != nil {
			t.Fatalf("Finish after 4 s of touches: %v", err)
		}
		if st := c.Stats(); st.Timeouts != 0 {
			t.Fatalf("timed out despite Touch: %+v", st)
		}
	})
}

func TestRequeueWithDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 10})
		defer c.Close()
		put(t, c, "retry me")
		m := await(t, c)
		start := time.Now()
		if err := m.Requeue(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := m.Requeue(0); !errors.Is(err, channel.ErrNotInFlight) {
			t.Fatalf("second Requeue: got %v", err)
		}
		again := await(t, c)
		if waited := time.Since(start); waited < 5*time.Second {
			t.Fatalf("requeued message delivered after %v, want >= 5s", waited)
		}
		if again.Attempts != 2 {
			t.Fatalf("attempts %d", again.Attempts)
		}
		again.Finish()
	})
}

func TestDeferredPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 10})
		defer c.Close()
		start := time.Now()
		c.PutWith(context.Background(), []byte("later"), channel.PutOptions{Delay: time.Minute})
		put(t, c, "now")
		if m := await(t, c); string(m.Body) != "now" {
			t.Fatalf("got %q first", m.Body)
		} else {
			m.Finish()
		}
		if st := c.Stats(); st.Deferred != 1 {
			t.Fatalf("Deferred %d", st.Deferred)
		}
		m := await(t, c)
		if string(m.Body) != "later" || time.Since(start) < time.Minute {
			t.Fatalf("got %q after %v", m.Body, time.Since(start))
		}
	})
}

// TestDeferredSurvivesRestart: a deferred message in a backend keeps its
// due time across Close and reopen.
func TestDeferredSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store()})
		start := time.Now()
		c.PutWith(context.Background(), []byte("due in an hour"), channel.PutOptions{Delay: time.Hour})
		time.Sleep(time.Minute) // virtual time (synctest)
		c.Close()
		c = newChannel(t, channel.Options{Backend: b.reopen().store()})
		defer c.Close()
		m := await(t, c)
		if elapsed := time.Since(start); elapsed < time.Hour {
			t.Fatalf("delivered after %v, before its due time", elapsed)
		}
		m.Finish()
	})
}

func TestMaxAttemptsDeadLetter(t *testing.T) {
	var mu sync.Mutex
	var dead []string
	var reasons []error
	c := newChannel(t, channel.Options{MemQueueSize: 10, MaxAttempts: 3, DeadLetter: func(m *channel.Message, reason error) error {
		mu.Lock()
		defer mu.Unlock()
		dead = append(dead, string(m.Body))
		reasons = append(reasons, reason)
		return nil
	}})
	defer c.Close()
	put(t, c, "poison")
	for i := 1; i <= 3; i++ {
		m := await(t, c)
		if m.Attempts != uint16(i) {
			t.Fatalf("attempt %d: got %d", i, m.Attempts)
		}
		m.Requeue(0)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0] != "poison" || !errors.Is(reasons[0], channel.ErrMaxAttempts) {
		t.Fatalf("dead letters %v %v", dead, reasons)
	}
	if c.Depth() != 0 {
		t.Fatalf("poison message still queued: Depth %d", c.Depth())
	}
}

func TestExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead []error
		c := newChannel(t, channel.Options{MemQueueSize: 10, DeadLetter: func(m *channel.Message, reason error) error { dead = append(dead, reason); return nil }})
		defer c.Close()
		c.PutWith(context.Background(), []byte("stale"), channel.PutOptions{Expires: time.Now().Add(time.Second)})
		c.PutWith(context.Background(), []byte("fresh"), channel.PutOptions{Expires: time.Now().Add(time.Hour)})
		time.Sleep(2 * time.Second) // virtual time (synctest)
		m := await(t, c)
		if string(m.Body) != "fresh" {
			t.Fatalf("got %q", m.Body)
		}
		if len(dead) != 1 || !errors.Is(dead[0], channel.ErrExpired) {
			t.Fatalf("dead letters %v", dead)
		}
	})
}

func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 10})
		defer c.Close()
		put(t, c, "x")
		c.Pause()
		got := make(chan *channel.Message)
		go func() {
			m, _ := c.Receive(context.Background())
			got <- m
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("delivered while paused")
		default:
		}
		if !c.Stats().Paused {
			t.Fatal("Stats does not show the pause")
		}
		c.Unpause()
		if m := <-got; string(m.Body) != "x" {
			t.Fatalf("got %q", m.Body)
		}
	})
}

// A Receive already waiting when Pause comes, and the Messages goroutine
// holding a message, deliver nothing until Unpause: idle workers wait in
// Receive, so a pause that spared them would stop nobody.
func TestPauseStopsWaitingReceivers(t *testing.T) {
	for _, backend := range []bool{false, true} {
		t.Run(fmt.Sprintf("backend=%v", backend), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := channel.Options{MemQueueSize: 10}
				if backend {
					o = channel.Options{Backend: newMemStore().store()}
				}
				c := newChannel(t, o)
				defer c.Close()
				got := make(chan *channel.Message, 1)
				go func() {
					m, _ := c.Receive(context.Background())
					got <- m
				}()
				msgs := c.Messages()
				put(t, c, "held") // the Messages goroutine takes one of the two
				synctest.Wait()
				c.Pause()
				put(t, c, "a", "b")
				synctest.Wait()
				select {
				case m := <-got:
					if string(m.Body) != "held" {
						t.Fatalf("Receive got %q while paused", m.Body)
					}
					got <- m
				default:
				}
				select {
				case m := <-msgs:
					t.Fatalf("Messages gave %q while paused", m.Body)
				default:
				}
				if st := c.Stats(); st.InFlight != 1 || c.Depth() != 2 {
					t.Fatalf("paused: %d in flight, Depth %d; want 1 (the held one) and 2", st.InFlight, c.Depth())
				}
				c.Unpause()
				var bodies []string
				for len(bodies) < 3 {
					select {
					case m := <-got:
						bodies = append(bodies, string(m.Body))
						m.Finish()
						go func() {
							m, _ := c.Receive(context.Background())
							got <- m
						}()
					case m := <-msgs:
						bodies = append(bodies, string(m.Body))
						m.Finish()
					}
				}
				slices.Sort(bodies)
				if !slices.Equal(bodies, []string{"a", "b", "held"}) {
					t.Fatalf("after Unpause got %q", bodies)
				}
			})
		})
	}
}

func TestEmpty(t *testing.T) {
	b := newMemStore()
	c := newChannel(t, channel.Options{MemQueueSize: 3, Backend: b.store()})
	defer c.Close()
	put(t, c, seq(10)...)
	m := await(t, c)
	if err := c.Empty(); err != nil {
		t.Fatal(err)
	}
	if c.Depth() != 0 || b.Depth() != 0 {
		t.Fatalf("after Empty: Depth %d backend %d", c.Depth(), b.Depth())
	}
	if err := m.Finish(); !errors.Is(err, channel.ErrNotInFlight) {
		t.Fatalf("Finish after Empty: %v", err)
	}
	put(t, c, "after")
	if m := await(t, c); string(m.Body) != "after" {
		t.Fatalf("got %q after Empty", m.Body)
	}
}

func TestReceiveBatchAndFinishAll(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 100})
	defer c.Close()
	put(t, c, seq(25)...)
	batch, err := c.ReceiveBatch(context.Background(), 10)
	if err != nil || len(batch) != 10 {
		t.Fatalf("batch of %d, %v", len(batch), err)
	}
	if err := c.FinishAll(batch); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Finishes != 10 || st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestMessagesChannel(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 10})
	put(t, c, "a", "b")
	for _, want := range []string{"a", "b"} {
		select {
		case m := <-c.Messages():
			if string(m.Body) != want {
				t.Fatalf("got %q", m.Body)
			}
			m.Finish()
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
		}
	}
	c.Close()
	if _, ok := <-c.Messages(); ok {
		t.Fatal("Messages not closed by Close")
	}
}

// TestMessagesHoldsOffTheTimeout: the message waiting in the Go channel of
// Messages until a consumer receives it does not time out meanwhile: it
// timed out, came again with its attempt counted and, with MaxAttempts 1,
// went to the dead-letter handler without any consumer seeing it. On the
// bubble's clock: on the real one, a stall of the forwarder longer than
// half the timeout (met under -race beside the other packages' tests on a
// busy machine) times the message out all the same.
func TestMessagesHoldsOffTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead atomic.Int64
		c := newChannel(t, channel.Options{
			MemQueueSize: 10, MsgTimeout: 100 * time.Millisecond, MaxAttempts: 1,
			DeadLetter: func(*channel.Message, error) error { dead.Add(1); return nil },
		})
		defer c.Close()
		put(t, c, "a")
		msgs := c.Messages()
		time.Sleep(1500 * time.Millisecond) // fifteen timeouts with nobody reading
		m := <-msgs
		if string(m.Body) != "a" || m.Attempts != 1 {
			t.Fatalf("got %q at attempt %d, want a at 1", m.Body, m.Attempts)
		}
		if err := m.Finish(); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		if st := c.Stats(); st.Timeouts != 0 || dead.Load() != 0 || st.Finishes != 1 {
			t.Fatalf("timeouts %d, dead letters %d, finishes %d; want 0, 0, 1", st.Timeouts, dead.Load(), st.Finishes)
		}
	})
}

// TestMessagesTinyMsgTimeout: a MsgTimeout of a nanosecond is valid, and
// Messages must not panic on it (a ticker of half of it was zero).
func TestMessagesTinyMsgTimeout(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 10, MsgTimeout: 1})
	defer c.Close()
	put(t, c, "a")
	select {
	case <-c.Messages():
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
}

func TestFailWhenFull(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 2, FailWhenFull: true})
	defer func() { c.Close() }()
	put(t, c, "a", "b")
	if err := c.Put(context.Background(), []byte("c")); !errors.Is(err, channel.ErrFull) {
		t.Fatalf("got %v, want ErrFull", err)
	}
}

func TestBlockWhenFull(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 1})
	put(t, c, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Put(ctx, []byte("b")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
	done := make(chan error)
	go func() { done <- c.Put(context.Background(), []byte("c")) }()
	await(t, c).Finish()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Close unblocks a Put that waits for room, and reports the message
	// it had to drop (no backend).
	go func() { done <- c.Put(context.Background(), []byte("d")) }()
	if err := c.Close(); err == nil {
		t.Fatal("Close of a memory-only channel holding a message reported nothing")
	}
	if err := <-done; !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("blocked Put after Close: %v", err)
	}
}

func TestBackendErrors(t *testing.T) {
	c := newChannel(t, channel.Options{Backend: errorBackend{}.store()})
	defer c.Close()
	err := c.Put(context.Background(), []byte("x"))
	if !errors.Is(err, errBackend) {
		t.Fatalf("got %v, want the backend's error", err)
	}
	if st := c.Stats(); st.Puts != 0 {
		t.Fatalf("a failed Put was counted: %+v", st)
	}
}

func TestUseAfterClose(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 1})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Put(context.Background(), nil); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Put: %v", err)
	}
	if _, err := c.Receive(context.Background()); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Receive: %v", err)
	}
	if err := c.Empty(); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Empty: %v", err)
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, o := range []channel.Options{{MemQueueSize: -1}, {MsgTimeout: -1}} {
		if _, err := channel.New(o); !errors.Is(err, channel.ErrInvalidOptions) {
			t.Fatalf("New(%+v): %v", o, err)
		}
	}
}

func TestBadRecordInBackend(t *testing.T) {
	b := newMemStore()
	b.Put(context.Background(), []byte("not an envelope"))
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	put(t, c, "good")
	if m := await(t, c); string(m.Body) != "good" {
		t.Fatalf("got %q", m.Body)
	}
	if st := c.Stats(); st.BadRecords != 1 {
		t.Fatalf("BadRecords %d", st.BadRecords)
	}
}

// TestPutWithLongLivedContext: Puts to the backend under one long-lived,
// cancellable context (a service's) work, and cancelling that context later
// does not reach back into Puts long finished. (That nothing stays
// registered per Put is not observable from here; see Channel.bound.)
func TestPutWithLongLivedContext(t *testing.T) {
	b := newMemStore()
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 1000; i++ {
		if err := c.Put(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Cancelling the service's context afterwards must not reach back into
	// Puts long finished; and Close must still end blocked work.
	cancel()
	if err := c.Put(context.Background(), []byte("after")); err != nil {
		t.Fatal(err)
	}
	if b.Depth() != 1001 {
		t.Fatalf("backend depth %d, want 1001", b.Depth())
	}
}

// stallingBackend is a memStore whose next read, once stall is armed,
// takes its record and then waits for release before returning it: the
// pump holds a record read before an Empty and goes on after it.
type stallingBackend struct {
	*memStore
	stall   atomic.Bool
	took    chan struct{}
	release chan struct{}
}

func (b *stallingBackend) store() channel.Store {
	s := b.memStore.store()
	s.Cursor = stallingCursor{s.Cursor, b}
	return s
}

type stallingCursor struct {
	channel.Cursor
	b *stallingBackend
}

func (c stallingCursor) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	n, err := c.Cursor.ReadBatch(ctx, dst)
	if err == nil && c.b.stall.CompareAndSwap(true, false) {
		close(c.b.took)
		<-c.b.release
	}
	return n, err
}

// A record the pump read just before an Empty is not delivered after it:
// the generation the pump stamps its messages with is loaded after the
// read, so it cannot tell; the seq Empty discarded below can.
func TestEmptyDiscardsARecordThePumpHeld(t *testing.T) {
	b := &stallingBackend{memStore: newMemStore(), took: make(chan struct{}), release: make(chan struct{})}
	b.stall.Store(true)
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	put(t, c, "before")
	<-b.took
	if err := c.Empty(); err != nil {
		t.Fatal(err)
	}
	close(b.release)
	put(t, c, "after")
	if m := await(t, c); string(m.Body) != "after" {
		t.Fatalf("got %q after Empty", m.Body)
	}
	if st := c.Stats(); c.Depth() != 0 || st.InFlight != 1 {
		t.Fatalf("after Empty and one Receive: Depth %d, %+v", c.Depth(), st)
	}
}

// Receivers waiting when Pause comes take nothing: each took a message of
// a burst put while paused and gave it back to the front of the ready
// list, the second ahead of the first, so one consumer after Unpause saw
// them out of put order (under KeySerial, a key's second message before
// its first).
func TestPauseKeepsPutOrder(t *testing.T) {
	for _, keys := range []channel.KeyPolicy{channel.KeyNone, channel.KeySerial} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newChannel(t, channel.Options{MemQueueSize: 10, Keys: keys})
				defer c.Close()
				const waiting = 4
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, waiting)
				for range waiting {
					go func() {
						m, err := c.Receive(ctx)
						if err == nil {
							err = fmt.Errorf("Receive returned %q while paused", m.Body)
						}
						done <- err
					}()
				}
				synctest.Wait()
				c.Pause()
				for i := range waiting {
					if err := c.PutWith(context.Background(), fmt.Appendf(nil, "%d", i), channel.PutOptions{Key: []byte("k")}); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				cancel()
				for range waiting {
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Fatal(err)
					}
				}
				c.Unpause()
				for i := range waiting {
					rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
					m, err := c.Receive(rctx)
					rcancel()
					if err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
					if want := fmt.Sprint(i); string(m.Body) != want {
						t.Fatalf("message %d after Unpause is %q, want %q", i, m.Body, want)
					}
					m.Finish()
				}
			})
		})
	}
}

// blockingBackend is a memStore whose Put blocks until ctx ends: a disk
// queue with BlockWhenFull on a full disk.
type blockingBackend struct{ *memStore }

func (b blockingBackend) store() channel.Store {
	s := b.memStore.store()
	s.Log = blockingLog{s.Log}
	return s
}

type blockingLog struct{ channel.Log }

func (blockingLog) Put(ctx context.Context, _ []byte) error {
	<-ctx.Done()
	return ctx.Err()
}

func (blockingLog) PutSeq(ctx context.Context, _ []byte) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// Close's wait for room is bounded in all, not per message (with n
// messages held in memory and a backend that stays full it took 5 s +
// (n-1) x 100 ms), and its error counts the messages lost.
func TestCloseStoresWithinItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		c := newChannel(t, channel.Options{MemQueueSize: n, Backend: blockingBackend{newMemStore()}.store()})
		for i := range n {
			put(t, c, fmt.Sprint(i))
		}
		start := time.Now()
		err := c.Close()
		took := time.Since(start)
		if took > 10*time.Second {
			t.Fatalf("Close with %d held messages and a full backend took %v", n, took)
		}
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d messages held in memory only are lost", n)) {
			t.Fatalf("Close: %v, want the %d messages it could not store counted lost", err, n)
		}
	})
}

// A Receive that took a message just as Pause and Close came gave it back
// to a ready list Close had already emptied: nobody had it, and Close did
// not count it. Now the Receive keeps it, or Close stores it.
func TestPauseRacingCloseLosesNothing(t *testing.T) {
	lost := 0
	for i := 0; i < 20000 && lost == 0; i++ {
		c, err := channel.New(channel.Options{MemQueueSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan bool, 1)
		go func() {
			m, err := c.Receive(context.Background())
			got <- err == nil && m != nil
		}()
		runtime.Gosched()
		c.Pause()
		closed := make(chan error, 1)
		go func() {
			if err := c.Put(context.Background(), []byte("x")); err != nil {
				t.Errorf("Put: %v", err)
			}
			runtime.Gosched()
			closed <- c.Close()
		}()
		err = <-closed
		if !<-got && err == nil {
			lost++
			t.Errorf("iteration %d: the message was neither received nor reported by Close", i)
		}
	}
}

type failingEmptyBackend struct{ *stallingBackend }

func (b failingEmptyBackend) store() channel.Store {
	s := b.stallingBackend.store()
	s.Cursor = failingEmpty{s.Cursor}
	return s
}

type failingEmpty struct{ channel.Cursor }

func (failingEmpty) Empty() error { return errors.New("disk I/O error") }

// An Empty whose backend Empty fails leaves the backend's records to be
// delivered: it had raised emptiedBelow all the same, and the pump skipped
// them, uncounted, so Depth counted them for ever and nothing received
// them until a restart.
func TestFailedEmptyHidesNothing(t *testing.T) {
	b := failingEmptyBackend{&stallingBackend{memStore: newMemStore(), took: make(chan struct{}), release: make(chan struct{})}}
	b.stall.Store(true)
	c := newChannel(t, channel.Options{Backend: b.store()})
	defer c.Close()
	put(t, c, "a", "b")
	<-b.took
	if err := c.Empty(); err == nil {
		t.Fatal("Empty did not fail")
	}
	close(b.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("after a failed Empty, Depth %d, backend still holds %d records, Receive: %v", c.Depth(), b.Depth(), err)
	}
	m.Finish()
}
