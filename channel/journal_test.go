package channel_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// crashStores are a channel's stores, which crash copies as a SIGKILL
// leaves them: what was written and acknowledged up to then, nothing the
// abandoned channel does after.
type crashStores struct {
	backend          *memStore
	timers, journal  *memStore
	deadMu           sync.Mutex
	dead             []string // bodies dead-lettered, in every run
	maxAttempts      uint16
	noJournalForTest bool // the build before the journal, for the tests' own check
}

func newCrashStores(maxAttempts uint16) *crashStores {
	return &crashStores{backend: newMemStore(), timers: newMemStore(), journal: newMemStore(), maxAttempts: maxAttempts}
}

func (s *crashStores) open(t *testing.T) *channel.Channel {
	t.Helper()
	o := channel.Options{
		Backend: s.backend.store(), Timers: s.timers.store(), Deliveries: s.journal.store(),
		MaxAttempts: s.maxAttempts, MsgTimeout: time.Hour,
		DeadLetter: func(m *channel.Message, _ error) error {
			s.deadMu.Lock()
			s.dead = append(s.dead, string(m.Body))
			s.deadMu.Unlock()
			return nil
		},
	}
	if s.noJournalForTest {
		o.Deliveries = channel.Store{}
	}
	c, err := channel.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// crash abandons c as a crash would: the stores become copies of what
// they hold now, and c, closed, writes to the old ones only.
func (s *crashStores) crash(t *testing.T, c *channel.Channel) {
	t.Helper()
	b, tm, j := s.backend.snapshot(), s.timers.snapshot(), s.journal.snapshot()
	c.Close()
	s.backend, s.timers, s.journal = b, tm, j
}

// reopen is a graceful restart's: c is closed, the stores opened again.
func (s *crashStores) reopen(c *channel.Channel) {
	c.Close()
	s.backend, s.timers, s.journal = s.backend.reopen(), s.timers.reopen(), s.journal.reopen()
}

func (s *crashStores) deadLetters() []string {
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	return slices.Clone(s.dead)
}

// TestJournalCrashLoop: a message whose every delivery crashes the process
// comes back with one attempt more each time, and after MaxAttempts of
// them is dead-lettered; the message after it is delivered. From the
// backend, and from the timer store (put with a delay).
func TestJournalCrashLoop(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		t.Run("delay="+delay.String(), func(t *testing.T) {
			s := newCrashStores(3)
			c := s.open(t)
			if err := c.PutWith(context.Background(), []byte("poison"), channel.PutOptions{Delay: delay}); err != nil {
				t.Fatal(err)
			}
			for round := uint16(1); round <= 3; round++ {
				m := receive(t, c)
				if string(m.Body) != "poison" || m.Attempts != round {
					t.Fatalf("run %d: got %q with %d attempts, want poison with %d", round, m.Body, m.Attempts, round)
				}
				s.crash(t, c)
				c = s.open(t)
			}
			// The next Receive dead-letters it (from the timer store, once
			// the clock has released it), and waits on for the next.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := make(chan *channel.Message, 1)
			go func() {
				m, _ := c.Receive(ctx)
				got <- m
			}()
			waitFor(t, func() bool { return len(s.deadLetters()) > 0 })
			if dead := s.deadLetters(); !slices.Equal(dead, []string{"poison"}) {
				t.Fatalf("dead letters %q, want [poison]", dead)
			}
			if err := c.Put(context.Background(), []byte("later")); err != nil {
				t.Fatal(err)
			}
			m := <-got
			if m == nil || string(m.Body) != "later" || m.Attempts != 1 {
				t.Fatalf("after the crash loop: got %+v, want later with 1 attempt", m)
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
			if n := s.journal.Depth(); n != 0 {
				t.Fatalf("journal holds %d records once every message is done, want 0", n)
			}
			c.Close()
		})
	}
}

// TestJournalCrashLoopFailsWithout checks the test above checks something:
// without a journal the poison message comes back with 1 attempt each time.
func TestJournalCrashLoopFailsWithout(t *testing.T) {
	s := newCrashStores(3)
	s.noJournalForTest = true
	c := s.open(t)
	c.Put(context.Background(), []byte("poison"))
	for range 4 {
		if m := receive(t, c); m.Attempts != 1 {
			t.Fatalf("without a journal: %d attempts, want 1 (the count restarts)", m.Attempts)
		}
		s.crash(t, c)
		c = s.open(t)
	}
	c.Close()
}

// TestJournalCloseSpendsNone: a graceful Close gives the delivery it cuts
// short back (the next run counts it not), and a crash after still counts
// those before it.
func TestJournalCloseSpendsNone(t *testing.T) {
	s := newCrashStores(5)
	c := s.open(t)
	c.Put(context.Background(), []byte("a"))
	receive(t, c).Requeue(0)
	if m := receive(t, c); m.Attempts != 2 {
		t.Fatalf("second delivery has %d attempts", m.Attempts)
	}
	s.reopen(c)
	c = s.open(t)
	if m := receive(t, c); m.Attempts != 2 {
		t.Fatalf("after Close: %d attempts, want 2 (1 before, the one Close cut short not counted)", m.Attempts)
	}
	s.reopen(c)
	c = s.open(t)
	receive(t, c)
	s.crash(t, c)
	c = s.open(t)
	if m := receive(t, c); m.Attempts != 3 {
		t.Fatalf("after Close then a crash: %d attempts, want 3", m.Attempts)
	}
	c.Close()
}

// TestJournalReleaseThenCrash: a crash after a Release counts the
// deliveries before it, not the one released.
func TestJournalReleaseThenCrash(t *testing.T) {
	s := newCrashStores(5)
	c := s.open(t)
	c.Put(context.Background(), []byte("a"))
	receive(t, c).Requeue(0)
	m := receive(t, c)
	if m.Attempts != 2 {
		t.Fatalf("second delivery has %d attempts", m.Attempts)
	}
	if err := m.Release(0); err != nil {
		t.Fatal(err)
	}
	s.crash(t, c)
	c = s.open(t)
	if m := receive(t, c); m.Attempts != 2 {
		t.Fatalf("after a Release and a crash: %d attempts, want 2 (1 before the released delivery, and this)", m.Attempts)
	}
	c.Close()
}

// TestJournalRequeuedThenCrash: a message requeued and waiting for its
// next delivery when the process dies keeps the count of the deliveries
// it had.
func TestJournalRequeuedThenCrash(t *testing.T) {
	s := newCrashStores(5)
	c := s.open(t)
	c.Put(context.Background(), []byte("a"))
	receive(t, c).Requeue(0)
	receive(t, c).Requeue(0)
	s.crash(t, c)
	c = s.open(t)
	m := receive(t, c)
	if m.Attempts != 3 {
		t.Fatalf("after a crash with the message requeued twice: %d attempts, want 3", m.Attempts)
	}
	m.Finish()
	// Each delivery's record replaces the last: none is left once the
	// message is done.
	c.Put(context.Background(), []byte("b"))
	receive(t, c).Requeue(0)
	receive(t, c).Finish()
	if n := s.journal.Depth(); n != 0 {
		t.Fatalf("journal holds %d records once every message is done, want 0", n)
	}
	c.Close()
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// TestJournalNoWritesWithoutMaxAttempts: with MaxAttempts 0 the journal
// is not written to, and the entries a former run left are applied and
// acknowledged as their messages come.
func TestJournalNoWritesWithoutMaxAttempts(t *testing.T) {
	s := newCrashStores(3)
	c := s.open(t)
	c.Put(context.Background(), []byte("a"))
	c.Put(context.Background(), []byte("b"))
	receive(t, c)
	receive(t, c)
	s.crash(t, c)
	s.maxAttempts = 0
	c = s.open(t)
	for range 2 {
		m := receive(t, c)
		if m.Attempts != 2 {
			t.Fatalf("%q: %d attempts after a crash, want 2", m.Body, m.Attempts)
		}
		m.Finish()
	}
	if n := s.journal.Depth(); n != 0 {
		t.Fatalf("journal holds %d records, want 0", n)
	}
	c.Put(context.Background(), []byte("c"))
	receive(t, c)
	if n := s.journal.written(); n != 2 {
		t.Fatalf("journal has had %d records written, want the 2 of the first run", n)
	}
	c.Close()
}

// TestJournalStaleEntries: entries for records finished before a crash
// are dropped at New, by the store's report (its Cursor's Acknowledged)
// or, from a store that cannot tell, as the reads pass them, and the
// journal empties.
func TestJournalStaleEntries(t *testing.T) {
	for _, report := range []bool{false, true} {
		t.Run(map[bool]string{false: "passed", true: "reported"}[report], func(t *testing.T) {
			s := newCrashStores(3)
			c := s.open(t)
			for _, b := range []string{"a", "b", "c"} {
				c.Put(context.Background(), []byte(b))
			}
			a, b, cm := receive(t, c), receive(t, c), receive(t, c)
			// A crash between the record's acknowledgement and the
			// journal's: the journal still names a and c.
			j := s.journal.snapshot()
			a.Finish()
			cm.Finish()
			s.crash(t, c)
			s.journal = j
			o := channel.Options{Backend: s.backend.store(), Deliveries: s.journal.store(), MaxAttempts: 3}
			if !report {
				o.Backend.Cursor = unreportedAcks{o.Backend.Cursor}
			}
			c = mustNew(t, o)
			m := receive(t, c)
			if string(m.Body) != string(b.Body) || m.Attempts != 2 {
				t.Fatalf("got %q with %d attempts, want %q with 2", m.Body, m.Attempts, b.Body)
			}
			m.Finish()
			// A read past c's record drops its entry, if nothing did before.
			c.Put(context.Background(), []byte("d"))
			receive(t, c).Finish()
			if n := s.journal.Depth(); n != 0 {
				t.Fatalf("journal holds %d records, want 0", n)
			}
			c.Close()
		})
	}
}

// unreportedAcks is a Cursor that cannot tell which records were
// acknowledged (it says none was).
type unreportedAcks struct{ channel.Cursor }

func (unreportedAcks) Acknowledged(uint64) bool { return false }

func mustNew(t *testing.T, o channel.Options) *channel.Channel {
	t.Helper()
	c, err := channel.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestJournalOptions: a journal needs a backend.
func TestJournalOptions(t *testing.T) {
	if _, err := channel.New(channel.Options{Deliveries: newMemStore().store()}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("Deliveries without a Backend: %v", err)
	}
}
