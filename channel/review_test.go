package channel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// Receivers waiting when Pause comes each take a message of a burst put
// while paused and give it back to the front of the ready list: the
// second one given back goes ahead of the first, so one consumer after
// Unpause sees them out of put order (under KeySerial, a key's second
// message before its first).
func TestReviewPauseGiveBackKeepsOrder(t *testing.T) {
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
					rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
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

// blockingBackend is a memBackend whose Put blocks until ctx ends: a disk
// queue with BlockWhenFull on a full disk.
type blockingBackend struct{ *memBackend }

func (b blockingBackend) Put(ctx context.Context, _ []byte) error {
	<-ctx.Done()
	return ctx.Err()
}

// Close's wait for room is bounded per message, not in all: with n
// messages held in memory and a backend that stays full it takes 5 s +
// (n-1) x 100 ms.
func TestReviewCloseBoundedInAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		c := newChannel(t, channel.Options{MemQueueSize: n, Backend: blockingBackend{newMemBackend()}})
		for i := range n {
			put(t, c, fmt.Sprint(i))
		}
		start := time.Now()
		err := c.Close()
		took := time.Since(start)
		t.Logf("Close took %v (fake clock): %.200v", took, err)
		if took > 30*time.Second {
			t.Fatalf("Close with %d held messages and a full backend took %v", n, took)
		}
	})
}
