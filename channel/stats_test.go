package channel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spillq/spillq/channel"
)

// TestLatencyCountsEveryFinish: with a backlog only some finishes are
// timed, but the histogram still counts every one, and Puts counts every
// message put (failures aside).
func TestLatencyCountsEveryFinish(t *testing.T) {
	c := newChannel(t, channel.Options{MemQueueSize: 1000})
	defer c.Close()
	put(t, c, seq(1000)...)
	for range 1000 {
		if err := receive(t, c).Finish(); err != nil {
			t.Fatal(err)
		}
	}
	_, counts := c.LatencyBuckets()
	var total uint64
	for _, n := range counts {
		total += n
	}
	st := c.Stats()
	if total != 1000 || st.Finishes != 1000 || st.Puts != 1000 {
		t.Fatalf("histogram holds %d, Finishes %d, Puts %d; want 1000 each", total, st.Finishes, st.Puts)
	}
	c.Close()
	if err := c.Put(context.Background(), []byte("late")); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if st := c.Stats(); st.Puts != 1000 {
		t.Fatalf("a failed Put was counted: Puts %d", st.Puts)
	}
}
