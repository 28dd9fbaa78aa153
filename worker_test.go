package spillq_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// deadStore is a DeadLetter handler that keeps what it is given.
type deadStore struct {
	mu      sync.Mutex
	reasons map[string]error
}

func (d *deadStore) handle(m *channel.Message, reason error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reasons == nil {
		d.reasons = map[string]error{}
	}
	d.reasons[string(m.Body)] = reason
	return nil
}

func (d *deadStore) reason(body string) (error, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.reasons[body]
	return r, ok
}

func newWorker(t *testing.T, src channel.Receiver, h spillq.Handler, o spillq.WorkerOptions) *spillq.Worker {
	t.Helper()
	w, err := spillq.NewWorker(src, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runWorker starts w.Run and returns a stop that cancels its ctx and
// returns what Run returned.
func runWorker(w *spillq.Worker) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func TestWorkerAnswersByResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead deadStore
		c, err := channel.New(channel.Options{MemQueueSize: 100, MaxAttempts: 3, DeadLetter: dead.handle})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var mu sync.Mutex
		attempts := map[string][]uint16{}
		var snoozedAt, backAt time.Time
		unparsable := errors.New("unparsable")
		h := func(ctx context.Context, m *channel.Message) error {
			body := string(m.Body)
			mu.Lock()
			attempts[body] = append(attempts[body], m.Attempts)
			n := len(attempts[body])
			mu.Unlock()
			switch body {
			case "ok":
				return nil
			case "flaky": // fails twice, then works
				if n < 3 {
					return errors.New("flaky")
				}
				return nil
			case "always":
				return errors.New("down " + strings.Repeat("!", n))
			case "bad":
				return spillq.Permanent(unparsable)
			case "panics":
				panic("boom")
			case "snooze":
				if n == 1 {
					snoozedAt = time.Now()
					return spillq.Snooze(time.Hour)
				}
				backAt = time.Now()
				return nil
			}
			t.Errorf("unexpected body %q", body)
			return nil
		}
		w := newWorker(t, c, h, spillq.WorkerOptions{Concurrency: 4})
		stop := runWorker(w)
		for _, b := range []string{"ok", "flaky", "always", "bad", "panics", "snooze"} {
			put(t, c, b)
		}
		time.Sleep(2 * time.Hour) // virtual: every backoff and the snooze
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatalf("Run after its ctx ended: %v, want nil", err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string][]uint16{
			"ok": {1}, "flaky": {1, 2, 3}, "always": {1, 2, 3}, "bad": {1}, "panics": {1, 2, 3}, "snooze": {1, 1},
		}
		for body, w := range want {
			if got := attempts[body]; !slices.Equal(got, w) {
				t.Errorf("%s: attempts %v, want %v", body, got, w)
			}
		}
		if r, ok := dead.reason("always"); !ok || !errors.Is(r, channel.ErrMaxAttempts) || !strings.Contains(r.Error(), "down !!!") {
			t.Errorf("always: dead-letter reason %v, want ErrMaxAttempts with the last attempt's error", r)
		}
		if r, ok := dead.reason("bad"); !ok || !errors.Is(r, channel.ErrFailed) || !errors.Is(r, unparsable) {
			t.Errorf("bad: dead-letter reason %v, want ErrFailed wrapping the handler's error", r)
		}
		var pe *spillq.PanicError
		if r, ok := dead.reason("panics"); !ok || !errors.As(r, &pe) || pe.Value != "boom" || !strings.Contains(string(pe.Stack), "worker_test.go") {
			t.Errorf("panics: dead-letter reason %v, want a PanicError with the value and the handler's stack", r)
		}
		if _, ok := dead.reason("flaky"); ok {
			t.Error("flaky was dead-lettered, though its third attempt worked")
		}
		if d := backAt.Sub(snoozedAt); d < time.Hour {
			t.Errorf("snoozed message back after %v, want an hour", d)
		}
		st := w.Stats()
		if st.Finished != 3 || st.Retried != 6 || st.DeadLettered != 2 || st.Failed != 1 || st.Snoozed != 1 || st.Panics != 3 || st.InProgress != 0 || st.AnswerErrors != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestWorkerKeepsALongJobsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := channel.New(channel.Options{MemQueueSize: 10, MsgTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		done := make(chan uint16, 2)
		w := newWorker(t, c, func(ctx context.Context, m *channel.Message) error {
			time.Sleep(30 * time.Second) // thirty timeouts long
			done <- m.Attempts
			return nil
		}, spillq.WorkerOptions{Concurrency: 2})
		stop := runWorker(w)
		put(t, c, "long")
		if a := <-done; a != 1 {
			t.Fatalf("attempts %d, want 1", a)
		}
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Timeouts != 0 || st.Finishes != 1 {
			t.Fatalf("timeouts %d, finishes %d; want 0, 1 (the lease kept alive)", st.Timeouts, st.Finishes)
		}
	})
}

// With touching off, the same job times out and goes to a second worker:
// what the keeper is for.
func TestWorkerTouchOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := channel.New(channel.Options{MemQueueSize: 10, MsgTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w := newWorker(t, c, func(ctx context.Context, m *channel.Message) error {
			time.Sleep(3 * time.Second)
			return nil
		}, spillq.WorkerOptions{Concurrency: 2, TouchInterval: -1})
		stop := runWorker(w)
		put(t, c, "long")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		stop()
		if st := c.Stats(); st.Timeouts == 0 {
			t.Fatal("no timeout with touching off: the lease test proves nothing")
		}
	})
}

func TestWorkerAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead deadStore
		c, err := channel.New(channel.Options{MemQueueSize: 10, MaxAttempts: 2, DeadLetter: dead.handle})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w := newWorker(t, c, func(ctx context.Context, m *channel.Message) error {
			<-ctx.Done()
			return ctx.Err()
		}, spillq.WorkerOptions{Concurrency: 1, Timeout: 5 * time.Second})
		stop := runWorker(w)
		put(t, c, "hangs")
		time.Sleep(time.Hour)
		synctest.Wait()
		stop()
		if r, ok := dead.reason("hangs"); !ok || !errors.Is(r, context.DeadlineExceeded) {
			t.Fatalf("dead-letter reason %v, want the attempt's deadline", r)
		}
	})
}

// TestWorkerShutdown: once Run's ctx ends no message is taken; a handler
// that finishes within ShutdownTimeout is finished; one that does not is
// cancelled and its message given back with its attempt unspent; Run
// returns when all of them are answered.
func TestWorkerShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := channel.New(channel.Options{MemQueueSize: 100, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		started := make(chan string, 10)
		w := newWorker(t, c, func(ctx context.Context, m *channel.Message) error {
			started <- string(m.Body)
			d := time.Second
			if string(m.Body) == "long" {
				d = time.Hour
			}
			select {
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, spillq.WorkerOptions{Concurrency: 2, ShutdownTimeout: 5 * time.Second})
		put(t, c, "short", "long", "a", "b", "c")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-started
		<-started
		cancel()
		start := time.Now()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("Run returned %v after its ctx ended, want the ShutdownTimeout (5s)", d)
		}
		st := w.Stats()
		if st.Finished != 1 || st.Released != 1 || st.InProgress != 0 {
			t.Fatalf("stats %+v: want short finished, long released", st)
		}
		if cs := c.Stats(); cs.InFlight != 0 || c.Depth() != 4 {
			t.Fatalf("channel: in flight %d, depth %d; want 0 and the 3 never taken plus long", cs.InFlight, c.Depth())
		}
		m, err := c.TryReceive()
		if err != nil || string(m.Body) != "long" || m.Attempts != 1 {
			t.Fatalf("next: %v %v; want long, its attempt unspent (MaxAttempts 1 would have dead-lettered it)", m, err)
		}
		m.Finish()
	})
}

func TestWorkerSourceClosed(t *testing.T) {
	c, err := channel.New(channel.Options{MemQueueSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, c, func(context.Context, *channel.Message) error { return nil }, spillq.WorkerOptions{Concurrency: 3})
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	c.Close()
	if err := <-done; !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Run over a closed source: %v, want ErrClosed", err)
	}
}

func TestWorkerRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := channel.New(channel.Options{MemQueueSize: 10})
		defer c.Close()
		w := newWorker(t, c, func(context.Context, *channel.Message) error { return nil }, spillq.WorkerOptions{})
		stop := runWorker(w)
		synctest.Wait()
		if err := w.Run(context.Background()); !errors.Is(err, spillq.ErrWorkerRunning) {
			t.Fatalf("second Run: %v, want ErrWorkerRunning", err)
		}
		stop()
	})
	if _, err := spillq.NewWorker(nil, nil, spillq.WorkerOptions{}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("NewWorker(nil, nil): %v, want ErrInvalidOptions", err)
	}
}

func put(t *testing.T, c *channel.Channel, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if err := c.Put(context.Background(), []byte(b)); err != nil {
			t.Fatalf("Put %q: %v", b, err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after a minute: a
// condition to reach, not a time to take.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// TestWorkerRollingRestarts: a job longer than the drain deadline,
// MaxAttempts 2, its service restarted gracefully five times mid-job (a
// rolling deploy) is never dead-lettered, and finishes once the worker is
// left to run: neither the worker's shutdown nor the queue's Close spends
// its attempts.
func TestWorkerRollingRestarts(t *testing.T) {
	job, drain := 5*time.Second, time.Second
	if testing.Short() {
		job, drain = time.Second, 200*time.Millisecond
	}
	dir := t.TempDir()
	var dead deadStore
	o := spillq.Options{MaxAttempts: 2, DeadLetter: dead.handle}
	q := open(t, dir, o)
	if err := q.Put(context.Background(), []byte("long")); err != nil {
		t.Fatal(err)
	}
	q.Close()
	var mu sync.Mutex
	var attempts []uint16
	finished := make(chan struct{}, 1)
	h := func(ctx context.Context, m *channel.Message) error {
		mu.Lock()
		attempts = append(attempts, m.Attempts)
		mu.Unlock()
		select {
		case <-time.After(job):
			finished <- struct{}{}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for restart := 0; ; restart++ {
		q := open(t, dir, o)
		w := newWorker(t, q, h, spillq.WorkerOptions{Concurrency: 2, ShutdownTimeout: drain})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		if restart == 5 {
			<-finished
		} else {
			waitFor(t, "the job to start", func() bool { return w.Stats().InProgress == 1 })
		}
		cancel() // SIGTERM
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		if restart == 5 {
			if st := w.Stats(); st.Finished != 1 {
				t.Fatalf("last run's stats %+v, want the job finished", st)
			}
			break
		}
		if st := w.Stats(); st.Released != 1 {
			t.Fatalf("restart %d: stats %+v, want the job released", restart, st)
		}
	}
	if _, ok := dead.reason("long"); ok {
		t.Fatal("the long job was dead-lettered by restarts")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []uint16{1, 1, 1, 1, 1, 1}) {
		t.Fatalf("attempts per delivery %v, want 1 every time", attempts)
	}
}
