package spillq

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestTimerPutWhoseFsyncWaitEnds: a timer store that fsyncs each Put
// (Disk.SyncEvery 1) acknowledged its record and reported the Put failed
// when the ctx ended during the fsync, and a KeyDedup restart, which
// reads the timer store's records from its mark whether acknowledged or
// not, then remembered the key of a message that was nowhere: the
// producer's retry was refused (a review of the timer mark). Stored, it
// says so now, as the log's Put does: ErrNotDurable, the record kept.
func TestTimerPutWhoseFsyncWaitEnds(t *testing.T) {
	q, err := diskqueue.Open(t.TempDir(), diskqueue.Options{SyncEvery: math.MaxInt})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ts := newDeadStore(q)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // ended before the fsync is done, as if during it
	seq, err := ts.Put(ctx, []byte("deferred"))
	if q.NextSeq() == 0 {
		t.Fatalf("the cancelled Put stored nothing (%v): the test no longer builds the case it is for", err)
	}
	if !errors.Is(err, channel.ErrNotDurable) || q.Acknowledged(seq) {
		t.Fatalf("timer Put stored, its fsync wait ended: seq %d, %v, acknowledged %v; want ErrNotDurable and the record kept", seq, err, q.Acknowledged(seq))
	}
}
