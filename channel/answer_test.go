package channel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// deadLetters records what a channel's DeadLetter handler was given.
type deadLetters struct {
	mu      sync.Mutex
	bodies  []string
	reasons []error
	refuse  int // refuse this many more with an error
}

func (d *deadLetters) handle(m *channel.Message, reason error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refuse > 0 {
		d.refuse--
		return errors.New("store unavailable")
	}
	d.bodies = append(d.bodies, string(m.Body))
	d.reasons = append(d.reasons, reason)
	return nil
}

func (d *deadLetters) got() ([]string, []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.bodies...), append([]error(nil), d.reasons...)
}

func TestReleaseSpendsNoAttempt(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 10, MaxAttempts: 1})
	defer c.Close()
	put(t, c, "a", "b")
	for range 5 {
		m := receive(t, c)
		if string(m.Body) != "a" || m.Attempts != 1 {
			t.Fatalf("got %q attempts %d, want a released message first with attempts 1", m.Body, m.Attempts)
		}
		if err := m.Release(0); err != nil {
			t.Fatal(err)
		}
		if err := m.Release(0); !errors.Is(err, channel.ErrNotInFlight) {
			t.Fatalf("second Release: %v, want ErrNotInFlight", err)
		}
	}
	m := receive(t, c)
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Released != 5 || st.DeadLetters != 0 || st.Requeues != 0 {
		t.Fatalf("stats: released %d, dead letters %d, requeues %d; want 5, 0, 0", st.Released, st.DeadLetters, st.Requeues)
	}
}

func TestFailDeadLettersAtOnce(t *testing.T) {
	var dl deadLetters
	c := newChannel(t, channel.Options{MemQueueSize: 10, MaxAttempts: 5, DeadLetter: dl.handle})
	defer c.Close()
	put(t, c, "poison", "next")
	cause := errors.New("body does not parse")
	if err := receive(t, c).Fail(cause); err != nil {
		t.Fatal(err)
	}
	bodies, reasons := dl.got()
	if len(bodies) != 1 || bodies[0] != "poison" {
		t.Fatalf("dead letters %q, want [poison]", bodies)
	}
	if !errors.Is(reasons[0], channel.ErrFailed) || !errors.Is(reasons[0], cause) {
		t.Fatalf("reason %v: want ErrFailed wrapping the cause", reasons[0])
	}
	if m := receive(t, c); string(m.Body) != "next" {
		t.Fatalf("next delivery %q, want next", m.Body)
	}
	if st := c.Stats(); st.Failed != 1 || st.DeadLetters != 1 {
		t.Fatalf("stats: failed %d, dead letters %d; want 1, 1", st.Failed, st.DeadLetters)
	}
}

func TestRetryCarriesTheLastCause(t *testing.T) {
	var dl deadLetters
	c := newChannel(t, channel.Options{MemQueueSize: 10, MaxAttempts: 2, DeadLetter: dl.handle})
	defer c.Close()
	put(t, c, "flaky")
	if err := receive(t, c).Retry(0, errors.New("first")); err != nil {
		t.Fatal(err)
	}
	last := errors.New("second")
	m := receive(t, c)
	if m.Attempts != 2 {
		t.Fatalf("attempts %d, want 2", m.Attempts)
	}
	if err := m.Retry(0, last); err != nil {
		t.Fatal(err)
	}
	_, reasons := dl.got()
	if len(reasons) != 1 || !errors.Is(reasons[0], channel.ErrMaxAttempts) || !errors.Is(reasons[0], last) {
		t.Fatalf("reasons %v: want one wrapping ErrMaxAttempts and the last attempt's error", reasons)
	}
}

// A DeadLetter handler that fails loses nothing: the message comes round
// again and is handed to it once more.
func TestDeadLetterHandlerErrorKeepsTheMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dl := deadLetters{refuse: 2}
		b := newMemStore()
		c := newChannel(t, channel.Options{Backend: b.store(), MaxAttempts: 1, DeadLetter: dl.handle})
		defer c.Close()
		put(t, c, "job")
		if err := await(t, c).Requeue(0); err != nil { // its last attempt
			t.Fatal(err)
		}
		if bodies, _ := dl.got(); len(bodies) != 0 {
			t.Fatalf("handler refused, yet %q taken", bodies)
		}
		if b.Depth() != 1 {
			t.Fatalf("backend depth %d after a refused dead letter, want 1 (its record kept)", b.Depth())
		}
		// A waiting receiver is where a message out of attempts goes to
		// the handler when it comes round.
		go c.Receive(context.Background())
		time.Sleep(3 * time.Second) // virtual: two retries, a second apart
		synctest.Wait()
		bodies, reasons := dl.got()
		if len(bodies) != 1 || !errors.Is(reasons[0], channel.ErrMaxAttempts) {
			t.Fatalf("after retries: %q %v, want the job once with ErrMaxAttempts", bodies, reasons)
		}
		if b.Depth() != 0 {
			t.Fatalf("backend depth %d once the handler took it, want 0", b.Depth())
		}
		if st := c.Stats(); st.DeadLetterErrors != 2 || st.DeadLetters != 1 {
			t.Fatalf("stats: dead-letter errors %d, dead letters %d; want 2, 1", st.DeadLetterErrors, st.DeadLetters)
		}
	})
}

// A snooze: Release with a delay waits it out and spends no attempt.
func TestReleaseWithDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{Backend: newMemStore().store(), MaxAttempts: 1})
		defer c.Close()
		put(t, c, "later")
		start := time.Now()
		if err := await(t, c).Release(time.Minute); err != nil {
			t.Fatal(err)
		}
		m := await(t, c)
		if waited := time.Since(start); waited < time.Minute {
			t.Fatalf("delivered again after %v, want a minute", waited)
		}
		if m.Attempts != 1 {
			t.Fatalf("attempts %d after a released delivery, want 1", m.Attempts)
		}
		m.Finish()
	})
}
