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
	"github.com/spillq/spillq/internal/vfs"
)

// TestQueuePowerCut runs a whole queue (its log, timer store, dead-letter
// store and key state) with SyncEvery 1 on a file system that keeps only
// what was fsynced (vfs.MemFS), and cuts the power after every step of a
// workload of Puts (some deferred), Receives and Finishes across small
// segments. A queue opened on what was durable must hold every message
// whose Put returned: delivered, unless a Finish had been called for it
// (then it may be, or not), or deferred, counted in Stats.Deferred; and it
// must deliver nothing nobody put.
func TestQueuePowerCut(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	steps := 150
	if testing.Short() {
		steps = 50
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 27))
	mem := vfs.NewCrashableMem()
	opts := spillq.Options{Keys: channel.KeyUnique, Disk: diskqueue.Options{SyncEvery: 1, MaxSegmentBytes: 1 << 10, FS: mem}}
	q := open(t, memDir, opts)
	defer q.Close()
	ctx := context.Background()
	var (
		put      = map[string]bool{} // bodies whose Put returned, not deferred
		finished = map[string]bool{} // of those, the ones a Finish was called for
		deferred int                 // deferred messages whose Put returned
		pending  int                 // put, not yet received
	)
	for step := range steps {
		switch r := rng.IntN(6); {
		case r < 3:
			b := fmt.Sprintf("step-%03d", step)
			if err := q.PutWith(ctx, []byte(b), channel.PutOptions{Key: []byte(b)}); err != nil {
				t.Fatal(err)
			}
			put[b] = true
			pending++
		case r == 3:
			if err := q.PutWith(ctx, []byte(fmt.Sprintf("deferred-%03d", step)), channel.PutOptions{Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
			deferred++
		default:
			if pending == 0 {
				continue
			}
			m := recv(t, q)
			pending--
			finished[string(m.Body)] = true
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		checkPowerCut(t, step, mem.CrashClone(), opts, put, finished, deferred)
	}
}

// checkPowerCut opens the queue on cut and checks it against what the
// workload was promised.
func checkPowerCut(t *testing.T, step int, cut *vfs.MemFS, opts spillq.Options, put, finished map[string]bool, deferred int) {
	t.Helper()
	opts.Disk.FS = cut
	q, err := spillq.Open(memDir, opts)
	if err != nil {
		t.Fatalf("step %d: Open after a power cut: %v", step, err)
	}
	defer q.Close()
	if d := q.Stats().Deferred; d != deferred {
		t.Fatalf("step %d: after a power cut %d messages deferred, want %d (each Put returned after its fsync)", step, d, deferred)
	}
	missing := map[string]bool{}
	for b := range put {
		if !finished[b] {
			missing[b] = true
		}
	}
	if n := q.Stats().BackendDepth; n < int64(len(missing)) {
		t.Fatalf("step %d: after a power cut the log holds %d messages; %d whose Put returned (fsynced) were not finished", step, n, len(missing))
	}
	for len(missing) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := q.Receive(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("step %d: after a power cut %d messages whose Put returned (fsynced) are not delivered: %v", step, len(missing), keysOf(missing))
		}
		if err != nil {
			t.Fatalf("step %d: Receive after a power cut: %v", step, err)
		}
		b := string(m.Body)
		if !put[b] {
			t.Fatalf("step %d: after a power cut a message nobody put was delivered: %q", step, b)
		}
		delete(missing, b)
		if finished[b] {
			// Its acknowledgement went with the cut (at least once), while a
			// key state stored after the Finish may have let its key go.
			continue
		}
		// Its key is pending: a Put of it must be refused.
		if err := q.PutWith(context.Background(), []byte("again"), channel.PutOptions{Key: []byte(b)}); !errors.Is(err, channel.ErrDuplicate) {
			t.Fatalf("step %d: after a power cut, Put of the key of delivered message %q: %v, want ErrDuplicate", step, b, err)
		}
	}
}

func keysOf(m map[string]bool) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// TestKeyStateStoreSurvivesAPowerCut: the keeper fsyncs the log before it
// stores a key state, so once a state naming a key is stored a power cut
// keeps the key's message and its key stays pending. Here nothing else
// fsyncs the log (no sync tick for an hour, two records far from
// SyncEvery's 2500).
func TestKeyStateStoreSurvivesAPowerCut(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	opts := spillq.Options{Keys: channel.KeyUnique, Disk: diskqueue.Options{SyncInterval: time.Hour, FS: mem}}
	q := open(t, memDir, opts)
	defer q.Close()
	for _, k := range []string{"A", "B"} {
		if err := q.PutWith(ctx, []byte(k), channel.PutOptions{Key: []byte(k)}); err != nil {
			t.Fatal(err)
		}
		waitKeyNamed(t, mem, memDir, k)
		opts.Disk.FS = mem.CrashClone()
		q2 := open(t, memDir, opts)
		if n := q2.Disk().NextSeq(); n < 1 {
			t.Errorf("after a power cut that followed the store of a key state naming %s, the log is empty", k)
		}
		if err := q2.PutWith(ctx, []byte(k+" again"), channel.PutOptions{Key: []byte(k)}); !errors.Is(err, channel.ErrDuplicate) {
			t.Errorf("after a power cut that followed the store of a key state naming %s, Put of key %s: %v, want ErrDuplicate", k, k, err)
		}
		q2.Close()
	}
}
