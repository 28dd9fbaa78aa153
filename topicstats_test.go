package spillq_test

import (
	"context"
	"slices"
	"testing"

	"github.com/spillq/spillq"
)

// TestTopicStatsTimers: what a channel held at Close is in its timer
// store, not the log, and ChannelStats.Timers counts it, closed or open,
// after a restart too.
func TestTopicStatsTimers(t *testing.T) {
	dir := t.TempDir()
	tp := openTopic(t, dir, spillq.TopicOptions{})
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	putRange(t, tp, 0, 10)
	ctx := context.Background()
	for range 5 {
		if _, err := a.Receive(ctx); err != nil { // held in flight
			t.Fatal(err)
		}
	}
	timers := func(tp *spillq.Topic) (int64, int64) {
		t.Helper()
		for _, cs := range tp.Stats().Channels {
			if cs.Name == "a" {
				return cs.Cursor.Depth, cs.Timers
			}
		}
		t.Fatal("no channel a in Stats")
		return 0, 0
	}
	if depth, n := timers(tp); depth != 10 || n != 0 {
		t.Fatalf("before Close: depth %d, timers %d; want 10 and 0", depth, n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if depth, n := timers(tp); depth+n != 10 || n < 5 {
		t.Fatalf("channel closed: depth %d, timers %d; want the 5 in flight in its timer store, 10 in all", depth, n)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, spillq.TopicOptions{})
	defer tp.Close()
	if depth, n := timers(tp); depth+n != 10 || n < 5 {
		t.Fatalf("after a restart: depth %d, timers %d; want 10 in all", depth, n)
	}
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
	if depth, n := timers(tp); depth+n < 10 {
		t.Fatalf("opened again: depth %d, timers %d; want 10 in all", depth, n)
	}
	got := take(t, a, 10)
	slices.Sort(got)
	if !slices.Equal(got, span(0, 10)) {
		t.Fatalf("got %v, want 0..9", got)
	}
	nothingMore(t, a)
	if depth, n := timers(tp); depth != 0 || n != 0 {
		t.Fatalf("all finished: depth %d, timers %d; want 0 and 0", depth, n)
	}
}
