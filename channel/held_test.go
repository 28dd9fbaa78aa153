package channel_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// memLog is a topic's log for a Fanout over a memStore, whose cursor each
// channel run reads; the cursor outlives the channel, as a topic's does.
type memLog struct{ s *memStore }

// reopen is the cursor for the next channel run.
func (l *memLog) reopen() channel.Cursor { return l.s.cur }

// gatedTimers is a memStore whose reads of what it holds
// (Unacknowledged) wait until release is closed: a read of the timer
// store at New that has not finished yet, for as long as the test needs.
type gatedTimers struct {
	*memStore
	release chan struct{}
	once    sync.Once
	fail    error // the read yields it instead of the records
}

// open lets the read go on. The channel's Close waits for a read in
// progress, so a test that ends early must call it first.
func (s *gatedTimers) open() { s.once.Do(func() { close(s.release) }) }

func (s *gatedTimers) store() channel.Store {
	st := s.memStore.store()
	st.Cursor = gatedCursor{st.Cursor, s}
	return st
}

type gatedCursor struct {
	channel.Cursor
	s *gatedTimers
}

func (c gatedCursor) Unacknowledged(from, to uint64) iter.Seq2[diskqueue.Record, error] {
	return func(yield func(diskqueue.Record, error) bool) {
		<-c.s.release
		if c.s.fail != nil {
			yield(diskqueue.Record{}, c.s.fail)
			return
		}
		c.Cursor.Unacknowledged(from, to)(yield)
	}
}

// heldTopic is a topic of one channel over a memLog: the channel holds
// what put and inFlight leave it at Close, which its timer store keeps.
func heldTopic(t *testing.T, o channel.Options, put, inFlight int) (*channel.Fanout, *memLog, *memStore) {
	t.Helper()
	lg := &memLog{s: newMemStore()}
	fan, err := channel.NewFanout(lg.s.log, channel.FanoutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fan.SetDurable(1)
	s := newMemStore()
	o.Timers = s.store()
	c, err := fan.Join(lg.s.cur, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range put {
		if err := fan.Put(ctx, fmt.Appendf(nil, "held%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := fan.Stats(); st.ToMemory != int64(put) {
		t.Fatalf("%d of %d put to the memory buffer; want all", st.ToMemory, put)
	}
	for range inFlight {
		await(t, c)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Depth(); got != int64(put) {
		t.Fatalf("timer store holds %d after Close, want %d", got, put)
	}
	return fan, lg, s
}

// receiveBodies receives n messages, leaving them in flight.
func receiveBodies(t *testing.T, c *channel.Channel, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for range n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after %v: %v", got, err)
		}
		got = append(got, string(m.Body))
	}
	return got
}

func heldBodies(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("held%d", i))
	}
	slices.Sort(out)
	return out
}

// TestTopicChannelHeldFirst: what a topic's channel held at Close (its
// memory buffer, in flight) comes first when it is opened again, before a
// message put after the reopen, however long the read of its timer store
// takes: until then Receive takes nothing else. It took the new message
// from the memory buffer while the read had not finished.
func TestTopicChannelHeldFirst(t *testing.T) {
	o := channel.Options{MemQueueSize: 10}
	fan, lg, s := heldTopic(t, o, 3, 1)
	gs := &gatedTimers{memStore: s.reopen(), release: make(chan struct{})}
	o.Timers = gs.store()
	c, err := fan.Join(lg.reopen(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer gs.open() // before Close
	if err := fan.Put(context.Background(), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if st := fan.Stats(); st.ToMemory != 4 {
		t.Fatalf("ToMemory = %d; want the new message in the memory buffer", st.ToMemory)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if m, err := c.Receive(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive before the timer store is read: %q, %v; want nothing (context.Canceled)", m.Body, err)
	}
	gs.open()
	got := receiveBodies(t, c, 4)
	first := slices.Sorted(slices.Values(got[:3]))
	if !slices.Equal(first, heldBodies(3)) || got[3] != "new" {
		t.Fatalf("after the reopen got %v; want the 3 held at Close, then new", got)
	}
}

// TestTopicChannelHeldFirstPastMaxDeferred: more held at Close than
// Options.MaxDeferredInMemory, all received and kept in flight, still
// come first. Before the fix each read of the timer store after the first
// kept the released ones among the earliest and found nothing new, again
// and again, until they were finished: the next Receive waited for that.
func TestTopicChannelHeldFirstPastMaxDeferred(t *testing.T) {
	o := channel.Options{MemQueueSize: 10, MaxDeferredInMemory: 2}
	fan, lg, s := heldTopic(t, o, 7, 0)
	o.Timers = s.reopen().store()
	c, err := fan.Join(lg.reopen(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := fan.Put(context.Background(), []byte("new")); err != nil {
		t.Fatal(err)
	}
	got := receiveBodies(t, c, 8)
	first := slices.Sorted(slices.Values(got[:7]))
	if !slices.Equal(first, heldBodies(7)) || got[7] != "new" {
		t.Fatalf("after the reopen got %v; want the 7 held at Close, then new", got)
	}
	if st := c.TimerStats(); st.Refills > 5 {
		t.Errorf("%d reads of the timer store for 7 records, 2 at a time; want at most 5", st.Refills)
	}
}

// TestTopicChannelHeldReadFails: a timer store that cannot be read does
// not hold up delivery: the new message comes, the held ones later.
func TestTopicChannelHeldReadFails(t *testing.T) {
	o := channel.Options{MemQueueSize: 10}
	fan, lg, s := heldTopic(t, o, 2, 0)
	gs := &gatedTimers{memStore: s.reopen(), release: make(chan struct{}), fail: errors.New("unreadable")}
	gs.open()
	o.Timers = gs.store()
	c, err := fan.Join(lg.reopen(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := fan.Put(context.Background(), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got := receiveBodies(t, c, 1); got[0] != "new" {
		t.Fatalf("got %v; want new", got)
	}
}
