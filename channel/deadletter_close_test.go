package channel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// TestCloseWhileDeadLetterPuts: Close waits, holding Puts off, for every
// receiver between take and deliver (waitTakers), and deliver ran the
// DeadLetter handler on the receiver's goroutine (an expired message, or
// one whose attempts are used up). A handler that Puts on the same channel
// (it may) then waited for Close, which waited for it: neither returned (a
// review of Close's wait). The handler now runs once the receiver has left
// the take, and its Put returns ErrClosed.
func TestCloseWhileDeadLetterPuts(t *testing.T) {
	var c *channel.Channel
	entered := make(chan struct{})
	closing := make(chan struct{})
	putErr := make(chan error, 1)
	c, err := channel.New(channel.Options{
		MemQueueSize: 8,
		DeadLetter: func(m *channel.Message, reason error) {
			close(entered)
			<-closing
			time.Sleep(100 * time.Millisecond) // Close holds putMu by now
			putErr <- c.Put(context.Background(), []byte("again"))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.PutWith(ctx, []byte("x"), channel.PutOptions{Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c.Receive(rctx)
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	close(closing)
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not return in 3 s: it waits for the receiver whose DeadLetter handler waits for putMu, which Close holds")
	}
	select {
	case err := <-putErr:
		if !errors.Is(err, channel.ErrClosed) {
			t.Errorf("the handler's Put = %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the DeadLetter handler's Put did not return")
	}
}
