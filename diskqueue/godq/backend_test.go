package godq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue/godq"
)

func newGoDiskQueue(t *testing.T, dir string) godiskqueue.Interface {
	t.Helper()
	return godiskqueue.New("jobs", dir, 1<<20, 0, 1<<20, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
}

func body(i int) []byte { return []byte(fmt.Sprintf("job-%06d", i)) }

// TestChannelBackend runs the channel over nsqd's own disk queue.
func TestChannelBackend(t *testing.T) {
	c, err := channel.New(channel.Options{MemQueueSize: 10, Backend: godq.ChannelBackend(newGoDiskQueue(t, t.TempDir()))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		c.Put(ctx, body(i))
	}
	for i := 0; i < 100; i++ {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Body) != string(body(i)) {
			t.Fatalf("got %q, want %q", m.Body, body(i))
		}
		m.Finish()
	}
	if st := c.Stats(); st.Spills != 90 {
		t.Fatalf("Spills %d, want 90", st.Spills)
	}
}

// TestChannelBackendCloseKeepsEverything: go-diskqueue forgets a record
// once it is read, and the channel reads ahead of its consumers; a
// graceful Close must still keep every message not finished, whether it was
// in memory, read ahead or never read.
func TestChannelBackendCloseKeepsEverything(t *testing.T) {
	for _, tc := range []struct {
		name          string
		mem, finished int
	}{
		{"mem=5/finish=3", 5, 3},
		{"mem=0/no-consumer", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, err := channel.New(channel.Options{MemQueueSize: tc.mem, Backend: godq.ChannelBackend(newGoDiskQueue(t, dir))})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const n = 20
			for i := 0; i < n; i++ {
				if err := c.Put(ctx, body(i)); err != nil {
					t.Fatal(err)
				}
			}
			finished := map[string]bool{}
			for i := 0; i < tc.finished; i++ {
				m, err := c.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				finished[string(m.Body)] = true
				if err := m.Finish(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			dq := newGoDiskQueue(t, dir)
			c, err = channel.New(channel.Options{Backend: godq.ChannelBackend(dq)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			want := n - tc.finished
			if d := c.Depth(); d != int64(want) {
				t.Fatalf("Depth after reopen %d, want %d", d, want)
			}
			got := map[string]int{}
			for i := 0; i < want; i++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				m, err := c.Receive(rctx)
				cancel()
				if err != nil {
					t.Fatalf("after reopen, message %d of %d: %v", i+1, want, err)
				}
				got[string(m.Body)]++
				m.Finish()
			}
			for i := 0; i < n; i++ {
				b := string(body(i))
				if wantN := map[bool]int{true: 0, false: 1}[finished[b]]; got[b] != wantN {
					t.Fatalf("%s delivered %d times after reopen, want %d", b, got[b], wantN)
				}
			}
		})
	}
}

// TestChannelBackendRefusesWhatItCannotCarry: go-diskqueue numbers no
// records, so New refuses at once the options that need them (key
// policies that name records, a delivery journal, the adapter as a timer
// store) rather than fail later, and Replay says ErrNoReplay.
func TestChannelBackendRefusesWhatItCannotCarry(t *testing.T) {
	for name, o := range map[string]func(dq, other godiskqueue.Interface) channel.Options{
		"KeyUnique": func(dq, _ godiskqueue.Interface) channel.Options {
			return channel.Options{Backend: godq.ChannelBackend(dq), Keys: channel.KeyUnique}
		},
		"KeyDedup": func(dq, _ godiskqueue.Interface) channel.Options {
			return channel.Options{Backend: godq.ChannelBackend(dq), Keys: channel.KeyDedup}
		},
		"Deliveries": func(dq, other godiskqueue.Interface) channel.Options {
			return channel.Options{Backend: godq.ChannelBackend(dq), Deliveries: godq.ChannelBackend(other), MaxAttempts: 3}
		},
		"as Timers": func(dq, other godiskqueue.Interface) channel.Options {
			return channel.Options{Backend: godq.ChannelBackend(dq), Timers: godq.ChannelBackend(other)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			// Refused, New takes ownership of neither.
			dq, other := newGoDiskQueue(t, t.TempDir()), newGoDiskQueue(t, t.TempDir())
			defer dq.Close()
			defer other.Close()
			c, err := channel.New(o(dq, other))
			if !errors.Is(err, channel.ErrInvalidOptions) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("New: %v, want ErrInvalidOptions", err)
			}
		})
	}
	c, err := channel.New(channel.Options{Backend: godq.ChannelBackend(newGoDiskQueue(t, t.TempDir())), Keys: channel.KeySerial})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Replay(context.Background(), 0, 10); !errors.Is(err, channel.ErrNoReplay) {
		t.Fatalf("Replay: %v, want ErrNoReplay", err)
	}
}
