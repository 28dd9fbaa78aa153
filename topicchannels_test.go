package spillq_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestTopicReopenChannel: a channel closed and opened again in the same
// process misses nothing its pump had read ahead.
func TestTopicReopenChannel(t *testing.T) {
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer tp.Close()
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	putRange(t, tp, 0, 500)
	got := take(t, a, 10)
	if err := a.Close(); err != nil {
		t.Fatalf("Close channel: %v", err)
	}
	putRange(t, tp, 500, 600)
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
	got = append(got, take(t, a, 590)...)
	slices.Sort(got)
	if !slices.Equal(got, span(0, 600)) {
		t.Errorf("got %d distinct messages in order, want 0..599", len(got))
	}
	nothingMore(t, a)
}

// TestTopicChannelEmpty: Empty of one channel discards its backlog (and
// its deferred messages) and nothing of the others'; it holds no segment
// after, and a restart does not bring the backlog back.
func TestTopicChannelEmpty(t *testing.T) {
	dir := t.TempDir()
	tp := openTopic(t, dir, spillq.TopicOptions{Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}})
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	b := topicChannel(t, tp, "b", spillq.ChannelOptions{})
	putRange(t, tp, 0, 300)
	if err := tp.PutWith(context.Background(), body(999), channel.PutOptions{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	take(t, a, 5)
	if err := a.Empty(); err != nil {
		t.Fatalf("Empty: %v", err)
	}
	if st := a.Stats(); st.BackendDepth != 0 {
		t.Errorf("after Empty: BackendDepth %d, want 0", st.BackendDepth)
	}
	putRange(t, tp, 300, 310)
	if got := take(t, a, 10); !slices.Equal(got, span(300, 310)) {
		t.Errorf("a after Empty got %v, want 300..309", got)
	}
	nothingMore(t, a)
	if got := take(t, b, 310); !slices.Equal(got, span(0, 310)) {
		t.Errorf("b got %d messages, want 0..309 in order", len(got))
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, spillq.TopicOptions{})
	defer tp.Close()
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
	nothingMore(t, a)
	if st := a.Stats(); st.Deferred != 0 {
		t.Errorf("a after restart: %d deferred, want the emptied one gone", st.Deferred)
	}
	b = topicChannel(t, tp, "b", spillq.ChannelOptions{})
	if st := b.Stats(); st.Deferred != 1 {
		t.Errorf("b after restart: %d deferred, want 1", st.Deferred)
	}
}

// TestTopicKeySerial: a channel with KeySerial holds a key's next message
// while one is in flight; another channel of the topic without a policy
// does not.
func TestTopicKeySerial(t *testing.T) {
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer tp.Close()
	serial := topicChannel(t, tp, "serial", spillq.ChannelOptions{Keys: channel.KeySerial})
	free := topicChannel(t, tp, "free", spillq.ChannelOptions{})
	if _, err := tp.Channel("unique", spillq.ChannelOptions{Keys: channel.KeyUnique}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Errorf("KeyUnique on a topic's channel: %v, want ErrInvalidOptions", err)
	}
	ctx := context.Background()
	for _, kb := range [][2]string{{"a", "a1"}, {"a", "a2"}, {"b", "b1"}} {
		if err := tp.PutWith(ctx, []byte(kb[1]), channel.PutOptions{Key: []byte(kb[0])}); err != nil {
			t.Fatal(err)
		}
	}
	collect := func(ch *spillq.Channel, n int) ([]string, []*channel.Message) {
		var got []string
		var msgs []*channel.Message
		for range n {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := ch.Receive(rctx)
			cancel()
			if err != nil {
				break
			}
			got = append(got, string(m.Body))
			msgs = append(msgs, m)
		}
		return got, msgs
	}
	if got, _ := collect(free, 3); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
		t.Errorf("free channel got %v", got)
	}
	got, msgs := collect(serial, 2)
	if !slices.Equal(got, []string{"a1", "b1"}) || string(msgs[0].Key) != "a" {
		t.Fatalf("serial channel got %v, want [a1 b1] (a2 waits for a1)", got)
	}
	nothingMore(t, serial)
	msgs[0].Finish()
	if got, _ := collect(serial, 1); !slices.Equal(got, []string{"a2"}) {
		t.Errorf("after a1 finished: %v, want [a2]", got)
	}
}

// TestTopicChannelRefusedMakesNoChannel: Channel with options it refuses
// made the channel all the same (its cursor), which then held the topic's
// log with no one to read it, and Puts failed with ErrDiskFull once the
// log reached MaxDiskBytes, though the only channel read had finished
// everything.
func TestTopicChannelRefusedMakesNoChannel(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.TopicOptions{Disk: diskqueue.Options{MaxSegmentBytes: 4096, MaxDiskBytes: 64 << 10}}
	tp := openTopic(t, dir, opts)
	work := topicChannel(t, tp, "work", spillq.ChannelOptions{})
	for _, o := range []spillq.ChannelOptions{{MemQueueSize: -1}, {Keys: channel.KeyUnique}, {MsgTimeout: -time.Second}} {
		if _, err := tp.Channel("audit", o); !errors.Is(err, channel.ErrInvalidOptions) {
			t.Fatalf("Channel with %+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	if got := tp.Channels(); !slices.Equal(got, []string{"work"}) {
		t.Errorf("Channels() = %v after refused options, want [work]", got)
	}
	ctx := context.Background()
	for i := range 2000 { // 2000 x 100 B: several times MaxDiskBytes
		if err := tp.Put(ctx, make([]byte, 100)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		m, err := work.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	tp.Close()
	tp = openTopic(t, dir, opts)
	defer tp.Close()
	if got := tp.Channels(); !slices.Equal(got, []string{"work"}) {
		t.Errorf("Channels() = %v after a reopen, want [work]", got)
	}
}

// TestTopicLookup: Lookup hands out a channel open in this process and
// opens none: not one never opened, not one closed since.
func TestTopicLookup(t *testing.T) {
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer tp.Close()
	if c, ok := tp.Lookup("a"); ok || c != nil {
		t.Fatalf("Lookup of a channel never opened: %v, %v", c, ok)
	}
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	if c, ok := tp.Lookup("a"); !ok || c != a {
		t.Fatalf("Lookup of the open channel: %p, %v; want %p", c, ok, a)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if c, ok := tp.Lookup("a"); ok || c != nil {
		t.Fatalf("Lookup of a closed channel: %v, %v", c, ok)
	}
	if _, ok := tp.Lookup("a"); ok {
		t.Fatal("Lookup opened the channel")
	}
	if _, err := tp.DeadLetters("a"); err == nil {
		t.Fatal("after Lookup of a closed channel, it is open")
	}
}
