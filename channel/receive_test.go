package channel_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

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

func TestReceiveWithDoneContextTakesNothing(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 10})
	defer c.Close()
	put(t, c, "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if m, err := c.Receive(ctx); m != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive(done ctx) = %v, %v; want nil, context.Canceled", m, err)
	}
	if ms, err := c.ReceiveBatch(ctx, 4); ms != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("ReceiveBatch(done ctx) = %v, %v; want nil, context.Canceled", ms, err)
	}
	if st := c.Stats(); st.InFlight != 0 || st.MemoryDepth != 1 {
		t.Fatalf("in flight %d, memory depth %d; want 0, 1", st.InFlight, st.MemoryDepth)
	}
	m, err := c.TryReceive()
	if err != nil || string(m.Body) != "a" {
		t.Fatalf("TryReceive = %v, %v; want a", m, err)
	}
	if m, err := c.TryReceive(); m != nil || !errors.Is(err, channel.ErrNoMessage) {
		t.Fatalf("TryReceive on an empty channel = %v, %v; want ErrNoMessage", m, err)
	}
	c.Pause()
	m.Requeue(0)
	if m, err := c.TryReceive(); m != nil || !errors.Is(err, channel.ErrNoMessage) {
		t.Fatalf("TryReceive on a paused channel = %v, %v; want ErrNoMessage", m, err)
	}
	c.Close()
	if _, err := c.TryReceive(); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("TryReceive after Close: %v, want ErrClosed", err)
	}
}

// Messages after Close hands back a closed Go channel and starts nothing.
func TestMessagesAfterClose(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 1})
	c.Close()
	if _, ok := <-c.Messages(); ok {
		t.Fatal("a message from a closed channel")
	}
}
