package spillq_test

import (
	"context"
	"encoding/binary"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestDeferredOnDiskAfterRestart: deferred messages that sit in the disk
// log behind a backlog, before and after a restart, count in
// Stats.Deferred and not in DiskDepth or Depth.
func TestDeferredOnDiskAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		q := open(t, dir, spillq.Options{})
		const n, d = 300, 4
		putBacklogThenDeferred(t, q, n, d)
		check := func(when string, wantWaiting int64) {
			t.Helper()
			synctest.Wait()
			st := q.Stats()
			if st.Deferred != d || st.DiskDepth != wantWaiting || q.Depth() != wantWaiting {
				t.Fatalf("%s: Deferred %d, DiskDepth %d, Depth %d; want %d deferred, %d waiting", when, st.Deferred, st.DiskDepth, q.Depth(), d, wantWaiting)
			}
		}
		check("behind a backlog", n)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir, spillq.Options{})
		defer q.Close()
		check("after a restart", n)
		for i := 0; i < n; i++ {
			recv(t, q).Finish()
		}
		check("with the backlog drained", 0)
	})
}

// TestDeferredFinishedBeforeRestart: a deferred message finished while
// older ones were still unfinished is acknowledged out of order; after a
// restart it is neither delivered nor counted as deferred, and Depth counts
// the older ones alone.
func TestDeferredFinishedBeforeRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	dq, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// More plain messages than the channel reads ahead, so after the
	// restart its background count of deferred messages gets to the
	// deferred record before the pump does.
	const plain = 200
	for i := 0; i < plain; i++ {
		dq.Put(ctx, channel.MarshalMessage(channel.ID(i+1), time.Now(), []byte("plain")))
	}
	// The same envelope with a due time an hour ahead (FORMAT.md: flag bit
	// 0, and the due time after the put time).
	deferred := channel.MarshalMessage(plain+1, time.Now(), nil)
	deferred[1] |= 1
	deferred = binary.BigEndian.AppendUint64(deferred, uint64(time.Now().Add(time.Hour).UnixNano()))
	dq.Put(ctx, append(deferred, "deferred"...))
	var last diskqueue.Record
	for i := 0; i <= plain; i++ {
		if last, err = dq.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := dq.Ack(last.Seq); err != nil { // the deferred one; the plain ones stay unfinished
		t.Fatal(err)
	}
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	q := open(t, dir, spillq.Options{})
	defer q.Close()
	// Give the background count time to reach the deferred record while
	// the pump waits with its read-ahead full (it does either way; this
	// only makes the interleaving that used to go wrong the likely one).
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < plain; i++ {
		m := recv(t, q)
		if string(m.Body) != "plain" {
			t.Fatalf("got %q, want only the unfinished plain messages", m.Body)
		}
		m.Finish()
	}
	if st := q.Stats(); st.Deferred != 0 || q.Depth() != 0 {
		t.Fatalf("after the unfinished came back: Deferred %d, Depth %d; want 0 and 0", st.Deferred, q.Depth())
	}
}
