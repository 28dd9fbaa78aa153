package channel_test

import (
	"fmt"
	"testing"

	"github.com/spillq/spillq/channel"
)

// TestRequeueThenReceiveGetsTheRequeued: requeued messages come first, so
// a Receive right after Requeue(0), in the same goroutine, gets the
// message just requeued, not the next of the backlog, whether that
// backlog is in memory or in the backend.
func TestRequeueThenReceiveGetsTheRequeued(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func() channel.Options
	}{
		{"memory", func() channel.Options { return channel.Options{MemQueueSize: 100} }},
		{"backend", func() channel.Options { return channel.Options{Backend: newMemStore().store()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChannel(t, tc.opts())
			defer c.Close()
			for i := 0; i < 50; i++ {
				put(t, c, fmt.Sprintf("m%02d", i))
			}
			for i := 0; i < 50; i++ {
				want := fmt.Sprintf("m%02d", i)
				m := receive(t, c)
				if string(m.Body) != want || m.Attempts != 1 {
					t.Fatalf("got %q attempt %d, want %q attempt 1", m.Body, m.Attempts, want)
				}
				if err := m.Requeue(0); err != nil {
					t.Fatal(err)
				}
				again := receive(t, c)
				if string(again.Body) != want || again.Attempts != 2 {
					t.Fatalf("Receive right after Requeue(0) of %q got %q (attempt %d)", want, again.Body, again.Attempts)
				}
				if err := again.Finish(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
