package channel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

func putKey(t *testing.T, c *channel.Channel, key, body string) error {
	t.Helper()
	return c.PutWith(context.Background(), []byte(body), channel.PutOptions{Key: []byte(key)})
}

// ready returns the bodies of the messages ready now, received and left in
// flight, in order.
func ready(t *testing.T, c *channel.Channel) ([]string, []*channel.Message) {
	t.Helper()
	var bodies []string
	var msgs []*channel.Message
	for {
		m, err := c.TryReceive()
		if err != nil {
			return bodies, msgs
		}
		bodies = append(bodies, string(m.Body))
		msgs = append(msgs, m)
	}
}

func TestKeyUnique(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 100, Keys: channel.KeyUnique, MaxAttempts: 2})
	defer c.Close()
	if err := putKey(t, c, "a", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := putKey(t, c, "a", "a2"); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("second Put of a pending key: %v, want ErrDuplicate", err)
	}
	put(t, c, "no key") // keyless messages are not affected
	if err := putKey(t, c, "b", "b1"); err != nil {
		t.Fatal(err)
	}
	m := receive(t, c)
	if string(m.Key) != "a" || string(m.Body) != "a1" {
		t.Fatalf("got %q key %q", m.Body, m.Key)
	}
	// In flight, requeued: still pending.
	m.Requeue(0)
	if err := putKey(t, c, "a", "a3"); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("Put while a's message is requeued: %v", err)
	}
	m = receive(t, c)
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := putKey(t, c, "a", "a4"); err != nil {
		t.Fatalf("Put after a's message finished: %v", err)
	}
	st := c.Stats()
	if st.Duplicates != 2 || st.KeysPending != 2 || st.Puts != 4 {
		t.Errorf("Stats: %d duplicates, %d keys pending, %d puts; want 2, 2, 4", st.Duplicates, st.KeysPending, st.Puts)
	}
	// Out of attempts: dead-lettered, no longer pending.
	c2 := newChannel(t, channel.Options{MemQueueSize: 10, Keys: channel.KeyUnique, MaxAttempts: 1, DuplicatesOK: true, DeadLetter: func(*channel.Message, error) error { return nil }})
	defer c2.Close()
	putKey(t, c2, "k", "1")
	if err := putKey(t, c2, "k", "2"); err != nil {
		t.Fatalf("DuplicatesOK: %v, want nil", err)
	}
	receive(t, c2).Requeue(0) // its last attempt: dead letter
	if err := putKey(t, c2, "k", "3"); err != nil {
		t.Fatal(err)
	}
	if got, _ := ready(t, c2); !slices.Equal(got, []string{"3"}) {
		t.Errorf("after the dead letter: %v, want [3]", got)
	}
}

func TestKeyReplace(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 100, Keys: channel.KeyReplace})
	defer c.Close()
	for _, kb := range [][2]string{{"a", "a1"}, {"a", "a2"}, {"b", "b1"}, {"a", "a3"}} {
		if err := putKey(t, c, kb[0], kb[1]); err != nil {
			t.Fatal(err)
		}
	}
	got, msgs := ready(t, c)
	if !slices.Equal(got, []string{"b1", "a3"}) {
		t.Fatalf("delivered %v, want only the newest of each key: [b1 a3]", got)
	}
	// Superseded while in flight: finishes normally, the new one follows.
	putKey(t, c, "b", "b2")
	if err := msgs[0].Finish(); err != nil {
		t.Fatalf("Finish of a message superseded in flight: %v", err)
	}
	if got, _ := ready(t, c); !slices.Equal(got, []string{"b2"}) {
		t.Errorf("then %v, want [b2]", got)
	}
	if st := c.Stats(); st.Superseded != 2 {
		t.Errorf("Superseded = %d, want 2", st.Superseded)
	}
	// Superseded in flight and requeued: ended as superseded, not
	// delivered again (KeyReplace's doc).
	putKey(t, c, "a", "a4")
	if err := msgs[1].Requeue(0); err != nil {
		t.Fatalf("Requeue of a message superseded in flight: %v", err)
	}
	if got, _ := ready(t, c); !slices.Equal(got, []string{"a4"}) {
		t.Errorf("after a3, superseded in flight, was requeued: %v, want [a4]", got)
	}
	if st := c.Stats(); st.Superseded != 3 {
		t.Errorf("Superseded = %d, want 3", st.Superseded)
	}
}

// TestKeyDedup runs on synctest's clock: on the real one, a pause of 200
// ms between the two Puts (a busy machine's) ended the window between them.
func TestKeyDedup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 100, Keys: channel.KeyDedup, DedupWindow: 200 * time.Millisecond})
		defer c.Close()
		if err := putKey(t, c, "req-1", "x"); err != nil {
			t.Fatal(err)
		}
		await(t, c).Finish() // finished or not, the window counts puts
		if err := putKey(t, c, "req-1", "x again"); !errors.Is(err, channel.ErrDuplicate) {
			t.Fatalf("Put within the window: %v, want ErrDuplicate", err)
		}
		time.Sleep(250 * time.Millisecond)
		if err := putKey(t, c, "req-1", "x later"); err != nil {
			t.Fatalf("Put after the window: %v", err)
		}
		if got, _ := ready(t, c); !slices.Equal(got, []string{"x later"}) {
			t.Errorf("got %v", got)
		}
	})
}

// TestKeySerial: one message per key at a time, others flow past, order
// per key is put order across requeues.
func TestKeySerial(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 100, Keys: channel.KeySerial})
	defer c.Close()
	for _, kb := range [][2]string{{"a", "a1"}, {"a", "a2"}, {"b", "b1"}, {"a", "a3"}, {"b", "b2"}} {
		putKey(t, c, kb[0], kb[1])
	}
	put(t, c, "free")
	got, msgs := ready(t, c)
	if !slices.Equal(got, []string{"a1", "b1", "free"}) {
		t.Fatalf("first round %v, want [a1 b1 free]", got)
	}
	if st := c.Stats(); st.KeyWaiting != 3 || st.KeysPending != 2 {
		t.Errorf("Stats: %d waiting, %d keys held; want 3, 2", st.KeyWaiting, st.KeysPending)
	}
	msgs[0].Requeue(0) // a1 again before a2
	msgs[1].Finish()   // b2 may go
	got, msgs = ready(t, c)
	if !slices.Equal(got, []string{"a1", "b2"}) {
		t.Fatalf("second round %v, want [a1 b2]", got)
	}
	msgs[0].Finish()
	got, msgs = ready(t, c)
	if !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("third round %v, want [a2]", got)
	}
	msgs[0].Finish()
	if got, _ = ready(t, c); !slices.Equal(got, []string{"a3"}) {
		t.Fatalf("last round %v, want [a3]", got)
	}
}

func TestKeyLimits(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 10})
	defer c.Close()
	long := make([]byte, channel.MaxKeyBytes+1)
	if err := c.PutWith(context.Background(), []byte("x"), channel.PutOptions{Key: long}); !errors.Is(err, channel.ErrTooLarge) {
		t.Errorf("key over MaxKeyBytes: %v, want ErrTooLarge", err)
	}
	if err := c.PutWith(context.Background(), []byte("x"), channel.PutOptions{Key: []byte{}}); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, c); m.Key != nil {
		t.Errorf("an empty key is no key: got %q", m.Key)
	}
	if _, err := channel.New(channel.Options{Keys: 99}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Errorf("Keys 99: %v", err)
	}
}

// TestPutStoredNotDurable: a backend Put that stored its record but
// returned ErrNotDurable (its ctx ended during the fsync) is a Put done:
// the caller sees the error, the message is delivered once, Stats count
// it put, and under KeyUnique its key is taken, so a retry is refused as
// a duplicate. Before, the channel took the Put back: the key was
// released while the record stayed in the log, and the retry stored the
// message a second time.
func TestPutStoredNotDurable(t *testing.T) {
	ctx := context.Background()
	c, err := channel.New(channel.Options{Backend: notDurableBackend{newMemStore()}.store(), Keys: channel.KeyUnique})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := []byte("order-1")
	if err := c.PutWith(ctx, []byte("v1"), channel.PutOptions{Key: key}); !errors.Is(err, channel.ErrNotDurable) {
		t.Fatalf("PutWith: %v, want ErrNotDurable", err)
	}
	if err := c.PutWith(ctx, []byte("retry"), channel.PutOptions{Key: key}); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("retry of a stored Put: %v, want ErrDuplicate", err)
	}
	if err := c.Put(ctx, []byte("plain")); !errors.Is(err, channel.ErrNotDurable) {
		t.Fatalf("Put: %v, want ErrNotDurable", err)
	}
	if st := c.Stats(); st.Puts != 2 || st.Spills != 2 {
		t.Fatalf("Stats: Puts %d, Spills %d; want 2 and 2", st.Puts, st.Spills)
	}
	for _, want := range []string{"v1", "plain"} {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := c.Receive(rctx)
		cancel()
		if err != nil || string(m.Body) != want {
			t.Fatalf("Receive: %v, %v; want %q", m, err, want)
		}
		m.Finish()
	}
	if d := c.Depth(); d != 0 {
		t.Fatalf("Depth %d after both were finished", d)
	}
}

// TestCloseStoresNotDurable: Close stores again the message in flight; a
// backend Put that stored it with ErrNotDurable is a stored message, so
// its old record is acknowledged, not left beside the new one (which a
// restart delivered twice; a review found it).
func TestCloseStoresNotDurable(t *testing.T) {
	ctx := context.Background()
	b := notDurableBackend{newMemStore()}
	c, err := channel.New(channel.Options{Backend: b.store()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, []byte("held")); !errors.Is(err, channel.ErrNotDurable) {
		t.Fatal(err)
	}
	_ = receive(t, c) // in flight at Close
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	live := b.live()
	if live != 1 {
		t.Fatalf("%d live records after Close stored the message in flight, want 1", live)
	}
}
