package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// TestTopicPowerCut runs a topic with two channels (its log, each
// channel's cursor, timer store and dead letters) with SyncEvery 1 on a
// file system that keeps only what was fsynced (vfs.MemFS), and cuts the
// power after every step of a workload of Puts and of Receives and
// Finishes on either channel, across small segments. A topic opened on
// what was durable must deliver, on each channel, every message whose Put
// returned and that channel did not finish (one it finished may come
// again: at least once), and nothing nobody put.
func TestTopicPowerCut(t *testing.T) {
	steps := 100
	if testing.Short() {
		steps = 30
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 31))
	mem := vfs.NewCrashableMem()
	opts := spillq.TopicOptions{Disk: diskqueue.Options{SyncEvery: 1, MaxSegmentBytes: 1 << 10, FS: mem}}
	tp, err := spillq.OpenTopic(memDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	names := []string{"a", "b"}
	chans := map[string]*spillq.Channel{}
	for _, n := range names {
		if chans[n], err = tp.Channel(n, spillq.ChannelOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	var put []string // bodies whose Put returned, in order
	finished := map[string]map[string]bool{"a": {}, "b": {}}
	received := map[string]int{} // per channel, how many of put it took
	for step := range steps {
		switch r := rng.IntN(4); {
		case r < 2:
			b := fmt.Sprintf("step-%03d", step)
			if err := tp.Put(ctx, []byte(b)); err != nil {
				t.Fatal(err)
			}
			put = append(put, b)
		default:
			n := names[r-2]
			if received[n] == len(put) {
				continue
			}
			m, err := chans[n].Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			received[n]++
			finished[n][string(m.Body)] = true
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		checkTopicPowerCut(t, step, mem.CrashClone(), opts, names, put, finished)
	}
}

// checkTopicPowerCut opens the topic on cut and checks each channel
// against what the workload was promised.
func checkTopicPowerCut(t *testing.T, step int, cut *vfs.MemFS, opts spillq.TopicOptions, names, put []string, finished map[string]map[string]bool) {
	t.Helper()
	defer cut.Release()
	opts.Disk.FS = cut
	tp, err := spillq.OpenTopic(memDir, opts)
	if err != nil {
		t.Fatalf("step %d: OpenTopic after a power cut: %v", step, err)
	}
	defer tp.Close()
	isPut := map[string]bool{}
	for _, b := range put {
		isPut[b] = true
	}
	for _, n := range names {
		ch, err := tp.Channel(n, spillq.ChannelOptions{})
		if err != nil {
			t.Fatalf("step %d: channel %s after a power cut: %v", step, n, err)
		}
		missing := map[string]bool{}
		for _, b := range put {
			if !finished[n][b] {
				missing[b] = true
			}
		}
		for len(missing) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			m, err := ch.Receive(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("step %d: after a power cut channel %s does not deliver %d messages whose Put returned (fsynced) and that it did not finish: %v", step, n, len(missing), keysOf(missing))
			}
			if err != nil {
				t.Fatalf("step %d: Receive on %s after a power cut: %v", step, n, err)
			}
			if !isPut[string(m.Body)] {
				t.Fatalf("step %d: after a power cut channel %s delivered a message nobody put: %q", step, n, m.Body)
			}
			delete(missing, string(m.Body))
		}
	}
}
