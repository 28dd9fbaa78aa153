package channel_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/spillq/spillq/channel"
)

// A Receive that took a message just as Pause and Close came gives it back
// to a ready list Close has already emptied: nobody has it, and Close does
// not count it.
func TestReviewGiveBackAfterClose(t *testing.T) {
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
