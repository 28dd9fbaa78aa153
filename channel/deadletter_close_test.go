package channel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// TestCloseWhileDeadLetterPuts: a DeadLetter handler may Put to its
// channel. Close held Puts off while it waited for what runs handlers: a
// receiver between take and deliver (an expired message, or one whose
// attempts are used up), the goroutine behind Messages, and the clock (a
// message timed out after its last attempt). A handler that Put there
// waited for Close, which waited for it: neither returned (reviews of
// Close's waits). Close now waits for them with Puts let through, which
// return ErrClosed.
func TestCloseWhileDeadLetterPuts(t *testing.T) {
	for _, path := range []string{"receive", "messages", "timeout"} {
		t.Run(path, func(t *testing.T) {
			var c *channel.Channel
			entered := make(chan struct{})
			closing := make(chan struct{})
			putErr := make(chan error, 1)
			opts := channel.Options{
				MemQueueSize: 8,
				DeadLetter: func(m *channel.Message, reason error) error {
					close(entered)
					<-closing
					// Once Close has begun, and waits for this handler: a Put
					// it refuses stores nothing either way. (A sleep of 100
					// ms stood for this; a busy machine overran it, and the
					// Put went in before Close.)
					refused := channel.PutOptions{Key: make([]byte, channel.MaxKeyBytes+1)}
					for !errors.Is(c.PutWith(context.Background(), []byte("probe"), refused), channel.ErrClosed) {
						time.Sleep(time.Millisecond)
					}
					putErr <- c.Put(context.Background(), []byte("again"))
					return nil
				},
			}
			if path == "timeout" {
				opts.MsgTimeout, opts.MaxAttempts = 50*time.Millisecond, 1
			}
			c, err := channel.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			po := channel.PutOptions{}
			if path != "timeout" {
				po.Expires = time.Now().Add(-time.Second)
			}
			if err := c.PutWith(ctx, []byte("x"), po); err != nil {
				t.Fatal(err)
			}
			switch path {
			case "receive":
				go func() {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					c.Receive(rctx)
				}()
			case "messages":
				c.Messages()
			case "timeout":
				if _, err := c.Receive(ctx); err != nil { // not finished: it times out
					t.Fatal(err)
				}
			}
			<-entered
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			close(closing)
			select {
			case <-closed:
			case <-time.After(time.Minute):
				t.Fatal("Close did not return in a minute: it waits for the DeadLetter handler, whose Put waits for Close")
			}
			select {
			case err := <-putErr:
				if !errors.Is(err, channel.ErrClosed) {
					t.Errorf("the handler's Put = %v, want ErrClosed", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the DeadLetter handler's Put did not return")
			}
		})
	}
}
