package spillq_test

import (
	"context"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

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
		waitKeySave(t, nil, dir)
		if after := q.Disk().Stats().Syncs; after <= before {
			t.Errorf("the key state naming %s was stored with no fsync of the log since its Put (%d fsyncs before, %d after)", k, before, after)
		}
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
	waitKeySave(t, nil, dir)
	before := q.Timers().Stats().Syncs
	if err := q.PutWith(ctx, []byte("K"), channel.PutOptions{Key: []byte("K"), Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitKeySave(t, nil, dir) // names K
	if after := q.Timers().Stats().Syncs; after == before {
		t.Errorf("the key state naming K (its message in the timer store) was stored with no fsync of the timer store since K's Put (%d fsyncs)", after)
	}
}
