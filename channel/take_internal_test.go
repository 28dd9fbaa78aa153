package channel

import (
	"context"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/memlog"
)

// TestTakeMemoryBeforeReadAhead: a receiver that comes to wait as a
// message reaches the memory buffer and a newer one, spilled, the pump's
// read-ahead, takes the older from memory. Its wait chose at random
// between the two, so a spill drained out of put order now and then
// (TestSpillAndDrain under -race -cpu 1). The hook makes both ready for
// the wait every time; with the random choice, 64 rounds pass by chance
// one time in 2^64.
func TestTakeMemoryBeforeReadAhead(t *testing.T) {
	for round := range 64 {
		c, err := New(Options{MemQueueSize: 1, Backend: memlogStore(memlog.NewLog()), MsgTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		once := false
		c.takeWaitsForTesting = func() {
			if once {
				return
			}
			once = true
			// "older" fills the memory buffer, so "newer" spills.
			for _, body := range []string{"older", "newer"} {
				if err := c.Put(ctx, []byte(body)); err != nil {
					t.Error(err)
				}
			}
			for c.ahead.len() == 0 {
				time.Sleep(time.Millisecond) // the pump reads "newer"
			}
		}
		for _, want := range []string{"older", "newer"} {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Body) != want {
				t.Fatalf("round %d: received %q, want %q: memory's message after the backend's newer one", round, m.Body, want)
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
