package spillq_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

func openTopic(t *testing.T, dir string, o spillq.TopicOptions) *spillq.Topic {
	t.Helper()
	tp, err := spillq.OpenTopic(dir, o)
	if err != nil {
		t.Fatalf("OpenTopic: %v", err)
	}
	return tp
}

func topicChannel(t *testing.T, tp *spillq.Topic, name string, o spillq.ChannelOptions) *spillq.Channel {
	t.Helper()
	ch, err := tp.Channel(name, o)
	if err != nil {
		t.Fatalf("Channel(%q): %v", name, err)
	}
	return ch
}

func putRange(t *testing.T, tp *spillq.Topic, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := tp.Put(context.Background(), body(i)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
}

// consumer is what the tests' helpers take messages from: a queue, a
// topic's channel, or a channel made with package channel.
type consumer interface {
	Receive(ctx context.Context) (*channel.Message, error)
	TryReceive() (*channel.Message, error)
	Stats() channel.Stats
	Depth() int64
}

// take receives n messages from ch and finishes them, returning their
// indexes in the order received.
func take(t *testing.T, ch consumer, n int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []int
	for range n {
		m, err := ch.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after %d of %d: %v", len(got), n, err)
		}
		got = append(got, index(t, m))
		if err := m.Finish(); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	return got
}

// nothingMore fails if ch has a message ready.
func nothingMore(t *testing.T, ch consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if m, err := ch.Receive(ctx); err == nil {
		t.Fatalf("unexpected message %q", m.Body)
	}
}

func span(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestTopicChannels: three channels at different speeds, one paused for a
// while, a fourth created halfway from a sequence number: each sees every
// message from its start once, in order, and the log holds each message
// once.
func TestTopicChannels(t *testing.T) {
	dir := t.TempDir()
	tp := openTopic(t, dir, spillq.TopicOptions{Disk: diskqueue.Options{MaxSegmentBytes: 4 << 10}})
	defer tp.Close()
	fast := topicChannel(t, tp, "fast", spillq.ChannelOptions{})
	slow := topicChannel(t, tp, "slow", spillq.ChannelOptions{})
	paused := topicChannel(t, tp, "paused", spillq.ChannelOptions{})
	paused.Pause()
	const n = 2000
	var wg sync.WaitGroup
	var fastGot []int
	wg.Add(1)
	go func() {
		defer wg.Done()
		fastGot = take(t, fast, n)
	}()
	putRange(t, tp, 0, n/2)
	slowGot := take(t, slow, n/4)
	late := topicChannel(t, tp, "late", spillq.ChannelOptions{Start: diskqueue.FromSeq(n / 4)})
	putRange(t, tp, n/2, n)
	slowGot = append(slowGot, take(t, slow, n-n/4)...)
	lateGot := take(t, late, n-n/4)
	paused.Unpause()
	pausedGot := take(t, paused, n)
	wg.Wait()
	for _, c := range []struct {
		name string
		got  []int
		want []int
	}{{"fast", fastGot, span(0, n)}, {"slow", slowGot, span(0, n)}, {"paused", pausedGot, span(0, n)}, {"late", lateGot, span(n/4, n)}} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("channel %s: got %d messages, want %d in order", c.name, len(c.got), len(c.want))
		}
	}
	for _, ch := range []*spillq.Channel{fast, slow, paused, late} {
		nothingMore(t, ch)
	}
	st := tp.Stats()
	if st.Log.WriteSeq != n || st.Puts != n || st.ToLog != n {
		t.Errorf("log holds %d records for %d puts (%d to the log); want each once", st.Log.WriteSeq, st.Puts, st.ToLog)
	}
	if len(st.Channels) != 4 {
		t.Fatalf("Stats lists %d channels, want 4", len(st.Channels))
	}
	for _, cs := range st.Channels {
		if !cs.Open || cs.Cursor.Depth != 0 || cs.Lag != 0 || cs.Channel.Finishes == 0 {
			t.Errorf("channel %s: %+v; want open, finished, no lag", cs.Name, cs)
		}
	}
	if got := tp.Channels(); !slices.Equal(got, []string{"fast", "late", "paused", "slow"}) {
		t.Errorf("Channels = %v", got)
	}
}

// TestTopicRestart: channel names, places, deferred messages and what
// was in flight survive a graceful restart, per channel. (A channel has
// no Put: TestFacadeMethods.)
func TestTopicRestart(t *testing.T) {
	dir := t.TempDir()
	tp := openTopic(t, dir, spillq.TopicOptions{})
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	b := topicChannel(t, tp, "b", spillq.ChannelOptions{})
	putRange(t, tp, 0, 10)
	// A due time is wall-clock time (it outlives the process), so the check
	// is too: with the monotonic reading, a clock being slewed by NTP moved
	// the two apart by ~85 µs over 300 ms and failed it.
	due := time.Now().Round(0).Add(300 * time.Millisecond)
	if err := tp.PutWith(context.Background(), body(100), channel.PutOptions{Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := take(t, a, 4); !slices.Equal(got, span(0, 4)) {
		t.Fatalf("a got %v", got)
	}
	// One in flight on a, not finished: comes back after the restart.
	ctx := context.Background()
	m, err := a.Receive(ctx)
	if err != nil || index(t, m) != 4 {
		t.Fatalf("Receive: %v", err)
	}
	if err := tp.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_ = b

	tp = openTopic(t, dir, spillq.TopicOptions{})
	defer tp.Close()
	if got := tp.Channels(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after restart Channels = %v", got)
	}
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
	b = topicChannel(t, tp, "b", spillq.ChannelOptions{})
	// The deferred message comes once per channel, not before it is due,
	// and among the others wherever the time the test took to reach it
	// puts it (it came first, 300 ms overrun on a busy machine).
	takeAround := func(ch *spillq.Channel, n int) []int {
		t.Helper()
		var got []int
		deferred := 0
		for range n + 1 {
			i := take(t, ch, 1)[0]
			if i != 100 {
				got = append(got, i)
				continue
			}
			deferred++
			if early := time.Until(due); early > 0 {
				t.Errorf("the deferred message came %v before its due time", early)
			}
		}
		if deferred != 1 {
			t.Errorf("the deferred message came %d times, want once", deferred)
		}
		nothingMore(t, ch)
		return got
	}
	gotA := takeAround(a, 6)
	slices.Sort(gotA)
	if !slices.Equal(gotA, span(4, 10)) {
		t.Errorf("a after restart got %v, want 4..9", gotA)
	}
	if got := takeAround(b, 10); !slices.Equal(got, span(0, 10)) {
		t.Errorf("b after restart got %v, want 0..9", got)
	}
}

// TestTopicMemoryTier: with room in every channel's memory buffer the log
// is not written; once one channel is full, messages go to the log for all
// of them, and each still sees put order.
func TestTopicMemoryTier(t *testing.T) {
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer tp.Close()
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{MemQueueSize: 100})
	b := topicChannel(t, tp, "b", spillq.ChannelOptions{MemQueueSize: 10})
	putRange(t, tp, 0, 10)
	if st := tp.Stats(); st.ToMemory != 10 || st.Log.WriteSeq != 0 {
		t.Fatalf("first 10: %d to memory, log at %d; want all in memory", st.ToMemory, st.Log.WriteSeq)
	}
	putRange(t, tp, 10, 50) // b is full: to the log
	if st := tp.Stats(); st.ToLog != 40 {
		t.Fatalf("ToLog = %d, want 40", st.ToLog)
	}
	if got := take(t, a, 50); !slices.Equal(got, span(0, 50)) {
		t.Errorf("a got %v", got)
	}
	if got := take(t, b, 50); !slices.Equal(got, span(0, 50)) {
		t.Errorf("b got %v", got)
	}
	// Both drained: memory again.
	putRange(t, tp, 50, 55)
	if st := tp.Stats(); st.ToMemory != 15 {
		t.Errorf("ToMemory = %d after the drain, want 15", st.ToMemory)
	}
	// A channel not open holds the memory path shut: it reads the log.
	c := topicChannel(t, tp, "c", spillq.ChannelOptions{MemQueueSize: 100})
	c.Close()
	putRange(t, tp, 55, 60)
	if st := tp.Stats(); st.ToMemory != 15 {
		t.Errorf("ToMemory = %d with a channel closed, want 15", st.ToMemory)
	}
	c = topicChannel(t, tp, "c", spillq.ChannelOptions{})
	if got := take(t, c, 5); !slices.Equal(got, span(55, 60)) {
		t.Errorf("c got %v", got)
	}
}

// TestTopicMemoryTierAcrossRestart: what a channel's memory buffer held at
// Close goes to its timer store, all due at Close, and comes back in put
// order (it came back reversed while the timer heap broke ties at random).
func TestTopicMemoryTierAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	tp := openTopic(t, dir, spillq.TopicOptions{})
	topicChannel(t, tp, "a", spillq.ChannelOptions{MemQueueSize: 100})
	putRange(t, tp, 0, 20)
	if st := tp.Stats(); st.ToMemory != 20 {
		t.Fatalf("ToMemory = %d, want 20", st.ToMemory)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, spillq.TopicOptions{})
	defer tp.Close()
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{MemQueueSize: 100})
	if got := take(t, a, 20); !slices.Equal(got, span(0, 20)) {
		t.Errorf("after the restart a got %v, want 0..19 in order", got)
	}
	nothingMore(t, a)
}

// TestTopicRetention: a segment goes only once the slowest channel has
// finished it; DeleteChannel frees what only that channel held.
func TestTopicRetention(t *testing.T) {
	dir := t.TempDir()
	tp := openTopic(t, dir, spillq.TopicOptions{Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}})
	defer tp.Close()
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	topicChannel(t, tp, "b", spillq.ChannelOptions{})
	putRange(t, tp, 0, 1000)
	take(t, a, 1000)
	sync := func() {
		// Housekeeping runs on the writer goroutine; Sync waits for a
		// round of it.
		if err := spillq.SyncLog(context.Background(), tp); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	if st := tp.Log().Stats(); st.Segments < 10 {
		t.Fatalf("%d segments with b behind; want all kept", st.Segments)
	}
	if err := tp.DeleteChannel("b"); err != nil {
		t.Fatalf("DeleteChannel: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, spillq.ChannelsDir, "b")); !os.IsNotExist(err) {
		t.Errorf("b's timer store still there: %v", err)
	}
	if err := tp.DeleteChannel("b"); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Errorf("second DeleteChannel: %v, want ErrNotFound", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tp.Log().Stats().Segments > 2 && time.Now().Before(deadline) {
		sync()
		time.Sleep(10 * time.Millisecond)
	}
	if st := tp.Log().Stats(); st.Segments > 2 {
		t.Errorf("%d segments after deleting the slow channel, want at most 2", st.Segments)
	}
}

// TestTopicDirKinds: a topic's directory is not opened as a queue, nor a
// queue's as a topic.
func TestTopicDirKinds(t *testing.T) {
	td, qd := t.TempDir(), t.TempDir()
	tp := openTopic(t, td, spillq.TopicOptions{})
	tp.Close()
	if _, err := spillq.Open(td, spillq.Options{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		t.Errorf("Open of a topic's directory: %v", err)
	}
	q := open(t, qd, spillq.Options{})
	q.Close()
	if _, err := spillq.OpenTopic(qd, spillq.TopicOptions{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		t.Errorf("OpenTopic of a queue's directory: %v", err)
	}
}

// TestTopicDiskFullNamesTheChannel: at MaxDiskBytes a topic's Put says
// which channel holds the space, the one furthest behind, of those not set
// to drop when full ("abandoned", as far behind and listed first, holds
// none).
func TestTopicDiskFullNamesTheChannel(t *testing.T) {
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{Disk: diskqueue.Options{MaxDiskBytes: 64 << 10, MaxSegmentBytes: 8 << 10}})
	defer tp.Close()
	fast := topicChannel(t, tp, "billing", spillq.ChannelOptions{})
	topicChannel(t, tp, "abandoned", spillq.ChannelOptions{DropWhenFull: true}) // never read
	topicChannel(t, tp, "analytics", spillq.ChannelOptions{})                   // never read
	ctx := context.Background()
	var err error
	for i := 0; i < 100000; i++ {
		if err = tp.Put(ctx, body(i)); err != nil {
			break
		}
		if i%10 == 9 {
			take(t, fast, 10)
		}
	}
	if !errors.Is(err, diskqueue.ErrDiskFull) {
		t.Fatalf("Put at the budget: %v, want ErrDiskFull", err)
	}
	if !strings.Contains(err.Error(), `channel "analytics" is furthest behind`) {
		t.Fatalf("the error does not name the channel holding the space: %v", err)
	}
}

// TestTopicLagPolicy: at MaxDiskBytes a channel set to drop gives up its
// oldest segments, counted, so Puts go on and the channels that hold lose
// nothing; a channel that holds (the default) makes Put fail instead.
func TestTopicLagPolicy(t *testing.T) {
	disk := diskqueue.Options{MaxSegmentBytes: 8 << 10, MaxDiskBytes: 64 << 10}
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{Disk: disk})
	defer tp.Close()
	keep := topicChannel(t, tp, "keep", spillq.ChannelOptions{})
	lossy := topicChannel(t, tp, "lossy", spillq.ChannelOptions{DropWhenFull: true})
	lossy.Pause()
	const n = 3000 // about 5 times the budget
	var kept []int
	for i := range n {
		if err := tp.Put(context.Background(), body(i)); err != nil {
			t.Fatalf("Put %d with only a dropping channel behind: %v", i, err)
		}
		kept = append(kept, take(t, keep, 1)...)
	}
	if !slices.Equal(kept, span(0, n)) {
		t.Fatalf("the holding channel got %d messages, want all %d in order", len(kept), n)
	}
	var dropped int64
	for _, cs := range tp.Stats().Channels {
		if cs.Name == "lossy" {
			dropped = cs.Cursor.Dropped
		}
	}
	if dropped == 0 || dropped >= n {
		t.Fatalf("lossy dropped %d of %d", dropped, n)
	}
	lossy.Unpause()
	got := take(t, lossy, n-int(dropped))
	if !slices.Equal(got, span(int(dropped), n)) {
		t.Errorf("lossy got %d messages from %d; want the newest %d in order", len(got), got[0], n-int(dropped))
	}
	nothingMore(t, lossy)

	// A holding channel that falls behind stops the topic at the budget.
	stuck := topicChannel(t, tp, "stuck", spillq.ChannelOptions{})
	stuck.Pause()
	var err error
	for i := 0; i < 2*n && err == nil; i++ {
		err = tp.Put(context.Background(), body(i))
	}
	if !errors.Is(err, diskqueue.ErrDiskFull) {
		t.Fatalf("Put with a holding channel behind: %v, want ErrDiskFull", err)
	}
}

// TestOpenTopicRefusedMakesNoDirectory: as TestOpenRefusedMakesNoDirectory,
// for OpenTopic.
func TestOpenTopicRefusedMakesNoDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t")
	if _, err := spillq.OpenTopic(dir, spillq.TopicOptions{Keys: channel.KeySerial}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("OpenTopic with Keys KeySerial: %v, want ErrInvalidOptions", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenTopic refused its options and left %s behind (stat: %v)", dir, err)
	}
}

// dirSyncs is the OS's file system, recording the directories fsynced.
type dirSyncs struct {
	vfs.FS
	mu     sync.Mutex
	synced map[string]int
}

func (d *dirSyncs) SyncDir(dir string) error {
	d.mu.Lock()
	d.synced[dir]++
	d.mu.Unlock()
	return d.FS.SyncDir(dir)
}

// TestOpenTopicSyncsNewDirectories: the directories OpenTopic makes (the
// topic's, its channels/) have their entries fsynced in their parents, so
// a power cut cannot take them with the fsynced files inside.
func TestOpenTopicSyncsNewDirectories(t *testing.T) {
	root := t.TempDir()
	rec := &dirSyncs{FS: vfs.OS, synced: map[string]int{}}
	dir := filepath.Join(root, "topics", "orders")
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{Disk: diskqueue.Options{FS: rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, parent := range []string{root, filepath.Join(root, "topics"), dir} {
		if rec.synced[parent] == 0 {
			t.Errorf("OpenTopic made %s and fsynced %v: want %s fsynced", filepath.Join(dir, spillq.ChannelsDir), rec.synced, parent)
		}
	}
}
