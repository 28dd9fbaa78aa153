package spillq_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// copyDir copies the regular files under src to dst (a live queue's
// directory: what the kernel holds, as a crash leaves it). The key keeper
// may store its state meanwhile, writing state.tmp and renaming it over
// state: a file listed and gone before it is read is one a crash a moment
// later would not have left either, so it is skipped, not an error.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p != src {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitKeySave waits until dir's key state file is rewritten.
func waitKeySave(t *testing.T, dir string) []byte {
	t.Helper()
	p := filepath.Join(dir, spillq.KeysDir, "state")
	before, _ := os.ReadFile(p)
	// Not 5 s: the keeper waits 20 times as long as its last store took
	// (an fsync of the log, then of the state), and on a busy machine a
	// store of 250 ms puts the next one 5 s off.
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(p)
		if err == nil && !bytes.Equal(b, before) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatal("the key state was not stored within a minute")
		}
		time.Sleep(5 * time.Millisecond)
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
// The power cut is built from copies of a live queue's directory (a review
// of the key state's crash paths found it): the log as it was before the
// second Put (its last fsync), with the key state stored after it.
func TestKeyStateAheadOfTheLog(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	opts := spillq.Options{Keys: channel.KeyUnique}
	dir := t.TempDir()
	q := open(t, dir, opts)
	defer q.Close()
	if err := q.PutWith(ctx, []byte("A"), channel.PutOptions{Key: []byte("A")}); err != nil {
		t.Fatal(err)
	}
	waitKeySave(t, dir)
	synced := t.TempDir()
	copyDir(t, dir, synced) // the log as of its last fsync
	if err := q.PutWith(ctx, []byte("B"), channel.PutOptions{Key: []byte("B")}); err != nil {
		t.Fatal(err)
	}
	state := waitKeySave(t, dir) // names B, its watermark past it
	// The power cut: the log and its bitmaps as last fsynced, the key
	// state as last stored.
	cut := t.TempDir()
	copyDir(t, synced, cut)
	if err := os.WriteFile(filepath.Join(cut, spillq.KeysDir, "state"), state, 0o644); err != nil {
		t.Fatal(err)
	}

	q1, err := spillq.Open(cut, opts)
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
	crashed := t.TempDir()
	copyDir(t, cut, crashed)
	q1.Close()
	q2 := open(t, crashed, opts)
	defer q2.Close()
	if err := q2.PutWith(ctx, []byte("X again"), channel.PutOptions{Key: []byte("X")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("after a crash that followed, Put of key X (its message put and pending): %v, want ErrDuplicate", err)
	}
	if err := q2.PutWith(ctx, []byte("A again"), channel.PutOptions{Key: []byte("A")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("Put of key A (pending since before the power cut): %v, want ErrDuplicate", err)
	}
}

// TestKeyStateStoredAfterTheLogIsSynced: the keeper fsyncs the log before
// it stores a key state, so the state's watermark is never past what a
// power cut leaves of the log (TestKeyStateAheadOfTheLog). Here no sync
// tick comes (an hour) and two records are far from SyncEvery's 2500:
// only the keeper fsyncs the log.
func TestKeyStateStoredAfterTheLogIsSynced(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{Keys: channel.KeyUnique, Disk: diskqueue.Options{SyncInterval: time.Hour}})
	defer q.Close()
	for _, k := range []string{"A", "B"} {
		before := q.Disk().Stats().Syncs
		if err := q.PutWith(ctx, []byte(k), channel.PutOptions{Key: []byte(k)}); err != nil {
			t.Fatal(err)
		}
		waitKeySave(t, dir)
		if after := q.Disk().Stats().Syncs; after <= before {
			t.Errorf("the key state naming %s was stored with no fsync of the log since its Put (%d fsyncs before, %d after)", k, before, after)
		}
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

// TestKeyStateStoredAfterTheTimerStoreIsSynced: a KeyDedup key whose
// message waits in the timer store is in the key state, and the keeper
// fsynced only the log before it stored the state: a power cut could
// leave a state naming a message the cut took from the timer store, and
// the producer's retry was refused (a review of the key state's
// orderings). The keeper fsyncs the timer store too.
func TestKeyStateStoredAfterTheTimerStoreIsSynced(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour, Disk: diskqueue.Options{SyncInterval: time.Hour}})
	defer q.Close()
	if err := q.PutWith(ctx, []byte("A"), channel.PutOptions{Key: []byte("A")}); err != nil {
		t.Fatal(err)
	}
	waitKeySave(t, dir)
	before := q.Timers().Stats().Syncs
	if err := q.PutWith(ctx, []byte("K"), channel.PutOptions{Key: []byte("K"), Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitKeySave(t, dir) // names K
	if after := q.Timers().Stats().Syncs; after == before {
		t.Errorf("the key state naming K (its message in the timer store) was stored with no fsync of the timer store since K's Put (%d fsyncs)", after)
	}
}

// TestDedupDelayedKeyAcrossCrash: under KeyDedup a key put with a Delay
// was forgotten by a crash before the next store of the key state (about
// a second): its message waits in the timer store, and the rebuild read
// only the log's tail (a user's trial let a producer's retry in so). The
// state now stores the timer store's next seq too, and Open reads the
// timer store's records from there. The crash is a copy of the live
// directory (what the kernel holds): one key deferred before the last
// store, one after.
func TestDedupDelayedKeyAcrossCrash(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond)
	ctx := context.Background()
	opts := spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour}
	dir := t.TempDir()
	q := open(t, dir, opts)
	defer q.Close()
	if err := q.PutWith(ctx, []byte("A"), channel.PutOptions{Key: []byte("A"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	waitKeySave(t, dir)
	if err := q.PutWith(ctx, []byte("B"), channel.PutOptions{Key: []byte("B"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	if _, err := os.Stat(filepath.Join(crashed, spillq.KeysDir, "state")); err != nil {
		t.Fatal(err)
	}
	q2 := open(t, crashed, opts)
	defer q2.Close()
	for _, k := range []string{"A", "B"} {
		if err := q2.PutWith(ctx, []byte(k+" again"), channel.PutOptions{Key: []byte(k)}); !errors.Is(err, channel.ErrDuplicate) {
			t.Errorf("after a crash, Put of key %s (put a moment before with a Delay, waiting in the timer store): %v, want ErrDuplicate", k, err)
		}
	}
	if d := q2.Stats().Deferred; d != 2 {
		t.Errorf("after the crash %d messages deferred, want 2", d)
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
			waitKeySave(t, dir)
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
	opts := spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour, MemQueueSize: 10}
	dir := t.TempDir()
	q := open(t, dir, opts)
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
	waitKeySave(t, dir) // its timer mark past K's record
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	q2 := open(t, crashed, opts)
	defer q2.Close()
	if d := q2.Stats().Deferred; d != 1 {
		t.Fatalf("after the crash %d messages deferred, want 1 (K, from the timer store)", d)
	}
	if err := q2.PutWith(ctx, []byte("K again"), channel.PutOptions{Key: []byte("K")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("after a crash, Put of key K (its message in the timer store): %v, want ErrDuplicate", err)
	}
}
