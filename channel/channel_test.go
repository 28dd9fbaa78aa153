package channel_test

import (
	"context"
	"errors"
	"fmt"
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
