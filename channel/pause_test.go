package channel_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChannel(t, channel.Options{MemQueueSize: 10})
		defer c.Close()
		put(t, c, "x")
		c.Pause()
		got := make(chan *channel.Message)
		go func() {
			m, _ := c.Receive(context.Background())
			got <- m
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("delivered while paused")
		default:
		}
		if !c.Stats().Paused {
			t.Fatal("Stats does not show the pause")
		}
		c.Unpause()
		if m := <-got; string(m.Body) != "x" {
			t.Fatalf("got %q", m.Body)
		}
	})
}

// A Receive already waiting when Pause comes, and the Messages goroutine
// holding a message, deliver nothing until Unpause: idle workers wait in
// Receive, so a pause that spared them would stop nobody.
func TestPauseStopsWaitingReceivers(t *testing.T) {
	for _, backend := range []bool{false, true} {
		t.Run(fmt.Sprintf("backend=%v", backend), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := channel.Options{MemQueueSize: 10}
				if backend {
					o = channel.Options{Backend: newMemStore().store()}
				}
				c := newChannel(t, o)
				defer c.Close()
				got := make(chan *channel.Message, 1)
				go func() {
					m, _ := c.Receive(context.Background())
					got <- m
				}()
				msgs := c.Messages()
				put(t, c, "held") // the Messages goroutine takes one of the two
				synctest.Wait()
				c.Pause()
				put(t, c, "a", "b")
				synctest.Wait()
				select {
				case m := <-got:
					if string(m.Body) != "held" {
						t.Fatalf("Receive got %q while paused", m.Body)
					}
					got <- m
				default:
				}
				select {
				case m := <-msgs:
					t.Fatalf("Messages gave %q while paused", m.Body)
				default:
				}
				if st := c.Stats(); st.InFlight != 1 || c.Depth() != 2 {
					t.Fatalf("paused: %d in flight, Depth %d; want 1 (the held one) and 2", st.InFlight, c.Depth())
				}
				c.Unpause()
				var bodies []string
				for len(bodies) < 3 {
					select {
					case m := <-got:
						bodies = append(bodies, string(m.Body))
						m.Finish()
						go func() {
							m, _ := c.Receive(context.Background())
							got <- m
						}()
					case m := <-msgs:
						bodies = append(bodies, string(m.Body))
						m.Finish()
					}
				}
				slices.Sort(bodies)
				if !slices.Equal(bodies, []string{"a", "b", "held"}) {
					t.Fatalf("after Unpause got %q", bodies)
				}
			})
		})
	}
}

// Receivers waiting when Pause comes take nothing: each took a message of
// a burst put while paused and gave it back to the front of the ready
// list, the second ahead of the first, so one consumer after Unpause saw
// them out of put order (under KeySerial, a key's second message before
// its first).
func TestPauseKeepsPutOrder(t *testing.T) {
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
					rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
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

// A Receive that took a message just as Pause and Close came gave it back
// to a ready list Close had already emptied: nobody had it, and Close did
// not count it. Now the Receive keeps it, or Close stores it.
func TestPauseRacingCloseLosesNothing(t *testing.T) {
	lost := 0
	for i := 0; i < 20000 && lost == 0; i++ {
		c, err := channel.New(channel.Options{MemQueueSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan bool, 1)
		go func() {
			m, err := c.Receive(context.Background())
			got <- err == nil && m != nil
		}()
		runtime.Gosched()
		c.Pause()
		closed := make(chan error, 1)
		go func() {
			if err := c.Put(context.Background(), []byte("x")); err != nil {
				t.Errorf("Put: %v", err)
			}
			runtime.Gosched()
			closed <- c.Close()
		}()
		err = <-closed
		if !<-got && err == nil {
			lost++
			t.Errorf("iteration %d: the message was neither received nor reported by Close", i)
		}
	}
}
