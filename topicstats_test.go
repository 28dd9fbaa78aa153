package spillq_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
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

// deadLettersOf is ChannelStats.DeadLetters of the named channel.
func deadLettersOf(t *testing.T, tp *spillq.Topic, name string) int64 {
	t.Helper()
	for _, cs := range tp.Stats().Channels {
		if cs.Name == name {
			return cs.DeadLetters
		}
	}
	t.Fatalf("no channel %q in Stats", name)
	return 0
}

// failOne puts a message and fails it on ch (MaxAttempts 1: a dead
// letter).
func failOne(t *testing.T, tp *spillq.Topic, ch *spillq.Channel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tp.Put(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	m, err := ch.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Fail(errors.New("cannot")); err != nil {
		t.Fatal(err)
	}
}

// TestTopicStatsDeadLettersOpenNothing: Stats counts a closed channel's
// dead letters with one read of its store, then opens nothing for them at
// each call (it opened the store every time), and is not stale: nothing
// changes the store until the channel opens again, which reads it anew,
// since an operator's purge (OpenDeadLetters) waits for the topic's lock.
func TestTopicStatsDeadLettersOpenNothing(t *testing.T) {
	dir := t.TempDir()
	efs := &vfs.ErrorFS{}
	tp := openTopic(t, dir, spillq.TopicOptions{Disk: diskqueue.Options{FS: efs}})
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{MaxAttempts: 1})
	failOne(t, tp, a)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := deadLettersOf(t, tp, "a"); n != 1 {
		t.Fatalf("DeadLetters of the closed channel: %d, want 1", n)
	}
	efs.Arm(vfs.OpOpen, 1, errors.New("no opens in Stats"), true)
	n := deadLettersOf(t, tp, "a")
	fired := efs.Fired()
	efs.Heal()
	if fired != 0 || n != 1 {
		t.Fatalf("Stats again: DeadLetters %d, %d files opened; want 1 and none", n, fired)
	}
	store := filepath.Join(dir, spillq.ChannelsDir, "a", spillq.DeadDir)
	if d, err := spillq.OpenDeadLetters(store); !errors.Is(err, diskqueue.ErrLocked) {
		if err == nil {
			d.Close()
		}
		t.Fatalf("OpenDeadLetters of a closed channel's store while its topic is open: %v, want ErrLocked", err)
	}
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{MaxAttempts: 1})
	failOne(t, tp, a)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := deadLettersOf(t, tp, "a"); n != 2 {
		t.Fatalf("DeadLetters after the channel opened, dead-lettered one more and closed: %d, want 2", n)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := spillq.OpenDeadLetters(store)
	if err != nil {
		t.Fatalf("OpenDeadLetters with the topic closed: %v", err)
	}
	if n, err := d.Purge(context.Background(), spillq.DeadFilter{}); n != 2 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, spillq.TopicOptions{})
	defer tp.Close()
	if n := deadLettersOf(t, tp, "a"); n != 0 {
		t.Fatalf("DeadLetters after the purge: %d, want 0", n)
	}
}
