package spillq_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// memDir is where the tests on an in-memory file system keep their queue.
const memDir = "/q"

// on returns opts with the queue's files on fsys.
func on(fsys vfs.FS, opts spillq.Options) spillq.Options {
	opts.Disk.FS = fsys
	return opts
}

// waitKeySave waits until dir's key state file on fsys (nil: the OS's) is
// rewritten, and returns it.
func waitKeySave(t *testing.T, fsys vfs.FS, dir string) []byte {
	t.Helper()
	p := filepath.Join(dir, spillq.KeysDir, "state")
	before, _ := vfs.ReadFile(vfs.Or(fsys), p)
	return waitKeyStore(t, fsys, dir, func(b []byte) bool { return !bytes.Equal(b, before) })
}

// waitKeyNamed waits until dir's key state file on fsys names key, and
// returns it: it was stored after key's Put, and so were the fsyncs of the
// log and the timer store the keeper makes before it stores.
func waitKeyNamed(t *testing.T, fsys vfs.FS, dir, key string) []byte {
	t.Helper()
	return waitKeyStore(t, fsys, dir, func(b []byte) bool {
		keys, err := spillq.StoredKeys(b)
		return err == nil && slices.Contains(keys, key)
	})
}

// waitKeyStore waits until dir's key state file on fsys is one done
// accepts.
func waitKeyStore(t *testing.T, fsys vfs.FS, dir string, done func([]byte) bool) []byte {
	t.Helper()
	p := filepath.Join(dir, spillq.KeysDir, "state")
	// Not 5 s: the keeper waits 20 times as long as its last store took
	// (an fsync of the log, then of the state), and on a busy machine a
	// store of 250 ms puts the next one 5 s off.
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := vfs.ReadFile(vfs.Or(fsys), p)
		if err == nil && done(b) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatal("the key state was not stored within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// plant stores b as name on fsys durably (file and directory fsynced).
func plant(t *testing.T, fsys vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.SyncDir(filepath.Dir(name))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestKeyStateAheadOfTheLog: under the default sync policy the key state
// was stored about every second and the log fsynced every 2 s, and nothing
// fsynced the log up to the state's watermark before the state was stored.
// A power cut could so leave a state whose watermark was past the log's
// end, naming records that were gone, and every Open failed ("rebuild key
// state: ... seq W is past the end N") until someone removed keys/state by
// hand. Had it opened, the records put next would take seqs below the
// watermark, which the rebuild after a later crash does not read: a key
// pending then would be let in again. The keeper now fsyncs the log before
// it stores the state, and Open corrects a state stored ahead of the log
// (by an older build, or a file system that reorders), and stores it at
// once.
//
// The power cut is a real one (vfs.MemFS.CrashClone: what was fsynced)
// taken after the state naming A was stored, so the log holds A alone; the
// state stored after B is planted in it, as the older build stored it
// without an fsync of the log first.
func TestKeyStateAheadOfTheLog(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	opts := on(mem, spillq.Options{Keys: channel.KeyUnique})
	q := open(t, memDir, opts)
	defer q.Close()
	if err := q.PutWith(ctx, []byte("A"), channel.PutOptions{Key: []byte("A")}); err != nil {
		t.Fatal(err)
	}
	waitKeyNamed(t, mem, memDir, "A")
	cut := mem.CrashClone() // the log as of its last fsync: A
	if err := q.PutWith(ctx, []byte("B"), channel.PutOptions{Key: []byte("B")}); err != nil {
		t.Fatal(err)
	}
	state := waitKeyNamed(t, mem, memDir, "B") // its watermark past B
	plant(t, cut, filepath.Join(memDir, spillq.KeysDir, "state"), state)

	q1, err := spillq.Open(memDir, on(cut, opts))
	if err != nil {
		t.Fatalf("Open after a power cut that took the log's unsynced tail (allowed by the default policy) and left the key state stored after it: %v", err)
	}
	if n := q1.Disk().NextSeq(); n != 1 {
		t.Fatalf("after the cut the log ends at seq %d, want 1 (B lost)", n)
	}
	// B was lost with the log's tail (allowed); its key must be free.
	if err := q1.PutWith(ctx, []byte("B again"), channel.PutOptions{Key: []byte("B")}); err != nil {
		t.Errorf("after the power cut, Put of key B (its only message lost with the log's tail): %v", err)
	}
	// X takes seq 2, below the stored watermark; the process dies before
	// the next store of the key state.
	if err := q1.PutWith(ctx, []byte("X"), channel.PutOptions{Key: []byte("X")}); err != nil {
		t.Fatal(err)
	}
	crashed := cut.KillClone() // the process dies: the kernel keeps all it wrote
	q1.Close()
	q2 := open(t, memDir, on(crashed, opts))
	defer q2.Close()
	if err := q2.PutWith(ctx, []byte("X again"), channel.PutOptions{Key: []byte("X")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("after a crash that followed, Put of key X (its message put and pending): %v, want ErrDuplicate", err)
	}
	if err := q2.PutWith(ctx, []byte("A again"), channel.PutOptions{Key: []byte("A")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("Put of key A (pending since before the power cut): %v, want ErrDuplicate", err)
	}
}

// TestDedupDelayedKeyAcrossRestart: under KeyDedup a key put with a Delay
// was forgotten by a graceful restart: the message waits in the timer
// store, not the log, and the key state kept only keys whose message had a
// record in the log (a review of the key state's crash paths found it).
func TestDedupDelayedKeyAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	opts := spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour}
	q := open(t, dir, opts)
	if err := q.PutWith(ctx, []byte("v1"), channel.PutOptions{Key: []byte("k"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := q.PutWith(ctx, []byte("v2"), channel.PutOptions{Key: []byte("k")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("second Put before the restart = %v, want ErrDuplicate", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, opts)
	defer q.Close()
	if err := q.PutWith(ctx, []byte("v3"), channel.PutOptions{Key: []byte("k")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("Put of a key put (deferred) a moment before a graceful restart = %v, want ErrDuplicate", err)
	}
}

// TestDedupDelayedKeyAcrossCrash: under KeyDedup a key put with a Delay
// was forgotten by a crash before the next store of the key state (about
// a second): its message waits in the timer store, and the rebuild read
// only the log's tail (a user's trial let a producer's retry in so). The
// state now stores the timer store's next seq too, and Open reads the
// timer store's records from there. One key is deferred before the last
// store, one after; then the process dies (the kernel keeps what it
// wrote: both keys hold), or the power goes (A holds: the keeper fsynced
// the timer store before it stored the state naming A; B may be lost with
// its record, and then its key must be free).
func TestDedupDelayedKeyAcrossCrash(t *testing.T) {
	for _, crash := range []struct {
		name  string
		clone func(*vfs.MemFS) *vfs.MemFS
	}{{"kill", (*vfs.MemFS).KillClone}, {"power cut", (*vfs.MemFS).CrashClone}} {
		t.Run(crash.name, func(t *testing.T) {
			spillq.SetKeySaveInterval(t, 20*time.Millisecond)
			ctx := context.Background()
			mem := vfs.NewCrashableMem()
			opts := spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour}
			q := open(t, memDir, on(mem, opts))
			defer q.Close()
			if err := q.PutWith(ctx, []byte("A"), channel.PutOptions{Key: []byte("A"), Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
			waitKeyNamed(t, mem, memDir, "A")
			if err := q.PutWith(ctx, []byte("B"), channel.PutOptions{Key: []byte("B"), Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
			crashed := crash.clone(mem)
			if _, err := crashed.Stat(filepath.Join(memDir, spillq.KeysDir, "state")); err != nil {
				t.Fatal(err)
			}
			q2 := open(t, memDir, on(crashed, opts))
			defer q2.Close()
			deferred := q2.Stats().Deferred
			if crash.name == "kill" && deferred != 2 {
				t.Errorf("after the crash %d messages deferred, want 2", deferred)
			}
			if deferred < 1 || deferred > 2 {
				t.Fatalf("after the power cut %d messages deferred, want A's and maybe B's", deferred)
			}
			for _, k := range []string{"A", "B"} {
				err := q2.PutWith(ctx, []byte(k+" again"), channel.PutOptions{Key: []byte(k)})
				if k == "B" && deferred == 1 {
					if err != nil {
						t.Errorf("after a power cut that took B's record, Put of key B: %v, want it accepted", err)
					}
					continue
				}
				if !errors.Is(err, channel.ErrDuplicate) {
					t.Errorf("after a %s, Put of key %s (put a moment before with a Delay, waiting in the timer store): %v, want ErrDuplicate", crash.name, k, err)
				}
			}
		})
	}
}

// TestDedupTimerHoldMovesWithRequeues: the timer store holds its segments
// from the stored state's timer mark, and the key state was stored only
// when Puts, finishes or supersessions moved: a consumer that only
// requeued with a delay (a retry loop through a downstream outage) grew
// the timer store without bound (a review found 12.6 MB for 3,000 retries
// of a 4 KiB message, 148 KB without the hold).
func TestDedupTimerHoldMovesWithRequeues(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour, Disk: diskqueue.Options{MaxSegmentBytes: 16 << 10}})
	defer q.Close()
	if err := q.PutWith(ctx, make([]byte, 4<<10), channel.PutOptions{Key: []byte("retried")}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Requeue(time.Microsecond); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			waitKeySave(t, nil, dir)
		}
	}
	// 300 records of 4 KiB went through the timer store, about 1.2 MB:
	// the store after the last requeues lets all but the newest segments
	// go, once the keeper has stored the state (see waitKeySave's wait).
	deadline := time.Now().Add(time.Minute)
	for {
		st := q.Timers().Stats()
		if st.DiskBytes < 256<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 300 requeues with a delay and no Put, the timer store holds %d bytes in %d segments, want under 256 KiB", st.DiskBytes, st.Segments)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDedupKeyOfAMemoryMessageRequeuedToTimers: a keyed message put into
// the memory buffer is left out of the key state (a crash loses it), and
// a Requeue with a delay moved it to the timer store without telling the
// key state: once a store's timer mark had passed its record, a crash
// forgot the key, though the message came back from the timer store (a
// review of the timer mark).
func TestDedupKeyOfAMemoryMessageRequeuedToTimers(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	opts := on(mem, spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour, MemQueueSize: 10})
	q := open(t, memDir, opts)
	defer q.Close()
	if err := q.PutWith(ctx, []byte("K"), channel.PutOptions{Key: []byte("K")}); err != nil {
		t.Fatal(err)
	}
	m, err := q.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Requeue(time.Hour); err != nil {
		t.Fatal(err)
	}
	waitKeySave(t, mem, memDir) // its timer mark past K's record
	// The process dies: the kernel keeps what it wrote.
	q2 := open(t, memDir, on(mem.KillClone(), opts))
	defer q2.Close()
	if d := q2.Stats().Deferred; d != 1 {
		t.Fatalf("after the crash %d messages deferred, want 1 (K, from the timer store)", d)
	}
	if err := q2.PutWith(ctx, []byte("K again"), channel.PutOptions{Key: []byte("K")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("after a crash, Put of key K (its message in the timer store): %v, want ErrDuplicate", err)
	}
}
