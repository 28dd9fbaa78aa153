package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// putKV puts "k:v" with key k to tp and returns Put's error.
func putKV(tp *spillq.Topic, k string, v int) error {
	return tp.PutWith(context.Background(), []byte(fmt.Sprintf("%s:%d", k, v)), channel.PutOptions{Key: []byte(k)})
}

// receiveKV receives one message from ch within 10 s.
func receiveKV(t *testing.T, ch consumer) (*channel.Message, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := ch.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	k, v := parseKV(t, m)
	return m, k, v
}

// TestTopicKeyUnique: a topic's KeyUnique refuses a Put while any channel
// has the key's message unfinished (deferred included), across a restart.
func TestTopicKeyUnique(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.TopicOptions{Keys: channel.KeyUnique}
	tp := openTopic(t, dir, opts)
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	b := topicChannel(t, tp, "b", spillq.ChannelOptions{})
	dup := func(v int, want bool) {
		t.Helper()
		err := putKV(tp, "k", v)
		if want != errors.Is(err, channel.ErrDuplicate) || !want && err != nil {
			t.Fatalf("Put k:%d = %v, want duplicate %v", v, err, want)
		}
	}
	dup(0, false)
	dup(1, true)
	m, _, _ := receiveKV(t, a)
	m.Finish()
	dup(2, true) // b has not finished it
	m, _, _ = receiveKV(t, b)
	m.Finish()
	dup(3, false)
	// A deferral keeps the message pending in its channel.
	m, _, v := receiveKV(t, a)
	if v != 3 {
		t.Fatalf("a got k:%d, want k:3", v)
	}
	if err := m.Requeue(time.Hour); err != nil {
		t.Fatal(err)
	}
	m, _, _ = receiveKV(t, b)
	m.Finish()
	dup(4, true)
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, opts)
	defer tp.Close()
	dup(5, true) // a still has k:3, given back to the log at Close
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
	m, _, v = receiveKV(t, a)
	if v != 3 {
		t.Fatalf("after the restart a got k:%d, want k:3", v)
	}
	m.Finish()
	dup(6, false)
	if st := tp.Stats(); st.Duplicates != 1 || st.KeysPending != 1 {
		t.Fatalf("Stats: %d duplicates, %d keys pending; want 1 (since the restart) and 1", st.Duplicates, st.KeysPending)
	}
}

// TestTopicKeyReplace: under a topic's KeyReplace every channel delivers
// only the newest version of each key it reaches, across a restart, and a
// channel far behind after a compaction too.
func TestTopicKeyReplace(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.TopicOptions{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}}
	tp := openTopic(t, dir, opts)
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	topicChannel(t, tp, "b", spillq.ChannelOptions{}) // behind until the end
	const keys, versions = 20, 4
	for v := range versions {
		for k := range keys {
			if err := putKV(tp, fmt.Sprintf("k%d", k), v); err != nil {
				t.Fatal(err)
			}
		}
	}
	newestOnly := func(ch *spillq.Channel, n, want int) {
		t.Helper()
		seen := map[string]bool{}
		for range n {
			m, k, v := receiveKV(t, ch)
			if v != want || seen[k] {
				t.Fatalf("delivered %s:%d; want each key's newest, %d, once", k, v, want)
			}
			seen[k] = true
			m.Finish()
		}
		nothingMore(t, ch)
	}
	newestOnly(a, keys, versions-1)
	if st := a.Stats(); st.Superseded != keys*(versions-1) {
		t.Fatalf("a superseded %d, want %d", st.Superseded, keys*(versions-1))
	}
	// Another version of each, and a restart before a reads it.
	for k := range keys {
		if err := putKV(tp, fmt.Sprintf("k%d", k), versions); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, opts)
	defer tp.Close()
	for k := range keys {
		if err := putKV(tp, fmt.Sprintf("k%d", k), versions+1); err != nil {
			t.Fatal(err)
		}
	}
	a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
	newestOnly(a, keys, versions+1)
	// b, which has read nothing, after a compaction.
	waitSealed(t, tp.Log(), 3)
	cs, err := tp.Compact(context.Background())
	if err != nil || cs.Removed == 0 {
		t.Fatalf("Compact: %+v, %v; want superseded versions removed", cs, err)
	}
	b := topicChannel(t, tp, "b", spillq.ChannelOptions{})
	newestOnly(b, keys, versions+1)
	if st := tp.Stats(); st.KeysPending != keys {
		t.Fatalf("%d keys pending, want %d", st.KeysPending, keys)
	}
	tp.KeyState() // prunes the keys every channel is past
	if st := tp.Stats(); st.KeysPending != 0 {
		t.Fatalf("%d keys pending after both channels finished every version; want 0", st.KeysPending)
	}
}

// TestTopicKeyDedup: a topic's KeyDedup refuses a key put within the
// window, finished or not, across a restart.
func TestTopicKeyDedup(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.TopicOptions{Keys: channel.KeyDedup, DedupWindow: time.Hour}
	tp := openTopic(t, dir, opts)
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	if err := putKV(tp, "k", 0); err != nil {
		t.Fatal(err)
	}
	m, _, _ := receiveKV(t, a)
	m.Finish()
	if err := putKV(tp, "k", 1); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("second Put of k = %v, want ErrDuplicate", err)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	tp = openTopic(t, dir, opts)
	defer tp.Close()
	if err := putKV(tp, "k", 2); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("Put of k after a restart = %v, want ErrDuplicate", err)
	}
	if err := putKV(tp, "j", 0); err != nil {
		t.Fatal(err)
	}
}

// TestTopicKeyOptions: the policies go where they belong.
func TestTopicKeyOptions(t *testing.T) {
	if _, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{Keys: channel.KeySerial}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("OpenTopic with KeySerial: %v, want ErrInvalidOptions (it is a channel's)", err)
	}
	for _, p := range []channel.KeyPolicy{channel.KeyNone, channel.KeyDedup} {
		if _, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{Keys: p, DedupWindow: -time.Second}); !errors.Is(err, channel.ErrInvalidOptions) {
			t.Fatalf("OpenTopic with %v and a negative DedupWindow: %v, want ErrInvalidOptions, as a queue's", p, err)
		}
	}
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer tp.Close()
	if _, err := tp.Channel("a", spillq.ChannelOptions{Keys: channel.KeyUnique}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("channel with KeyUnique: %v, want ErrInvalidOptions (it is the topic's)", err)
	}
}

// TestTopicKeyPolicyProperty: random keyed puts over a small key space,
// receives, finishes and requeues (at once, or for an hour) on two
// channels, compactions and restarts, under each of a topic's policies;
// what Put returns and what each channel delivers must match the model:
//
//   - KeyUnique: Put of a key some channel has not finished is ErrDuplicate;
//   - KeyReplace: every delivery is the newest version put of its key;
//   - KeyDedup: Put of a key put before is ErrDuplicate.
//
// Drained, the topic holds no key (but under KeyDedup). SPILLQ_SEED
// reproduces a run.
func TestTopicKeyPolicyProperty(t *testing.T) {
	seed := propertySeed()
	steps := 500
	if testing.Short() {
		steps = 150
	}
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyReplace, channel.KeyDedup} {
		t.Run(policy.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(policy)))
			t.Logf("SPILLQ_SEED=%d", seed)
			dir := t.TempDir()
			opts := spillq.TopicOptions{Keys: policy, DedupWindow: time.Hour, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}}
			if policy != channel.KeyReplace {
				opts.Disk.RetainBytes = 1 << 20
			}
			names := []string{"a", "b"}
			var tp *spillq.Topic
			chans := map[string]*spillq.Channel{}
			reopen := func() {
				tp = openTopic(t, dir, opts)
				for _, n := range names {
					chans[n] = topicChannel(t, tp, n, spillq.ChannelOptions{MsgTimeout: time.Hour})
				}
			}
			reopen()
			defer func() { tp.Close() }()
			// unfinished[ch][k]: versions of k put and not finished by ch.
			unfinished := map[string]map[string]map[int]bool{"a": {}, "b": {}}
			newest := map[string]int{}
			everPut := map[string]bool{}
			type held struct {
				ch string
				m  *channel.Message
			}
			var inFlight []held
			ctx := context.Background()
			var removed int64
			for step := range steps {
				switch op := rng.IntN(12); {
				case op < 4: // put
					k := fmt.Sprintf("k%d", rng.IntN(5))
					v := step
					err := putKV(tp, k, v)
					pending := len(unfinished["a"][k])+len(unfinished["b"][k]) > 0
					dup := policy == channel.KeyUnique && pending || policy == channel.KeyDedup && everPut[k]
					if dup != errors.Is(err, channel.ErrDuplicate) || !dup && err != nil {
						t.Fatalf("step %d: Put %s:%d = %v, want duplicate %v (unfinished a %v, b %v)", step, k, v, err, dup, unfinished["a"][k], unfinished["b"][k])
					}
					if !dup {
						for _, n := range names {
							if unfinished[n][k] == nil {
								unfinished[n][k] = map[int]bool{}
							}
							unfinished[n][k][v] = true
						}
						newest[k], everPut[k] = v, true
					}
				case op < 7: // receive on one channel
					n := names[rng.IntN(2)]
					m, err := chans[n].TryReceive()
					if err != nil {
						continue
					}
					k, v := parseKV(t, m)
					if !unfinished[n][k][v] {
						t.Fatalf("step %d: %s delivered %s:%d, which it finished or was never put", step, n, k, v)
					}
					if policy == channel.KeyReplace && v != newest[k] {
						t.Fatalf("step %d: %s delivered %s:%d, newest is %d", step, n, k, v, newest[k])
					}
					inFlight = append(inFlight, held{n, m})
				case op < 10 && len(inFlight) > 0: // finish or requeue one
					i := rng.IntN(len(inFlight))
					h := inFlight[i]
					inFlight = append(inFlight[:i], inFlight[i+1:]...)
					switch rng.IntN(5) {
					case 0:
						h.m.Requeue(0)
						continue
					case 1:
						h.m.Requeue(time.Hour) // pending, out of reach until a restart
						continue
					}
					if err := h.m.Finish(); err != nil {
						t.Fatalf("step %d: Finish: %v", step, err)
					}
					k, v := parseKV(t, h.m)
					delete(unfinished[h.ch][k], v)
					if policy == channel.KeyReplace {
						// The newest finished: the older ones are never delivered.
						for x := range unfinished[h.ch][k] {
							if x < v {
								delete(unfinished[h.ch][k], x)
							}
						}
					}
				case op == 10: // compact
					cs, err := tp.Compact(ctx)
					if err != nil {
						t.Fatalf("step %d: Compact: %v", step, err)
					}
					removed += cs.Removed
				default: // restart
					if err := tp.Close(); err != nil {
						t.Fatalf("step %d: Close: %v", step, err)
					}
					inFlight = nil
					reopen()
				}
			}
			// Drain: whatever is in flight or deferred comes back at once
			// after a restart.
			if err := tp.Close(); err != nil {
				t.Fatal(err)
			}
			reopen()
			for _, n := range names {
				drain(t, chans[n], func() int64 { return channelDepth(tp, n) }, func(m *channel.Message) {
					k, v := parseKV(t, m)
					if !unfinished[n][k][v] || policy == channel.KeyReplace && v != newest[k] {
						t.Fatalf("drain: %s delivered %s:%d (unfinished %v, newest %d)", n, k, v, unfinished[n][k], newest[k])
					}
					if err := m.Finish(); err != nil {
						t.Fatal(err)
					}
				})
			}
			tp.KeyState() // prunes what every channel is past
			if st := tp.Stats(); policy != channel.KeyDedup && st.KeysPending != 0 {
				t.Fatalf("drained: %d keys pending; want none", st.KeysPending)
			}
			t.Logf("compactions removed %d records", removed)
		})
	}
}

// channelDepth is the records channel name of tp has not finished.
func channelDepth(tp *spillq.Topic, name string) int64 {
	for _, c := range tp.Stats().Channels {
		if c.Name == name {
			return c.Cursor.Depth
		}
	}
	return 0
}

// TestTopicPinnedDelayReopen: a keyed message put with a delay, which a
// channel under the topic's KeyUnique or KeyReplace keeps in place in the
// log, is still deferred when the channel is closed and opened again.
func TestTopicPinnedDelayReopen(t *testing.T) {
	for _, policy := range []channel.KeyPolicy{channel.KeyNone, channel.KeyUnique, channel.KeyReplace} {
		t.Run(policy.String(), func(t *testing.T) {
			tp := openTopic(t, t.TempDir(), spillq.TopicOptions{Keys: policy})
			defer tp.Close()
			a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
			ctx := context.Background()
			if err := tp.PutWith(ctx, []byte("k:1"), channel.PutOptions{Key: []byte("k"), Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for a.Stats().Deferred == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the message put with a delay never showed as deferred")
				}
				time.Sleep(time.Millisecond)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			a = topicChannel(t, tp, "a", spillq.ChannelOptions{})
			deadline = time.Now().Add(10 * time.Second)
			for a.Stats().Deferred == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("after the reopen the message is not deferred: %+v", a.Stats())
				}
				time.Sleep(time.Millisecond)
			}
			nothingMore(t, a)
		})
	}
}
