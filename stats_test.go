package spillq_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// TestDeferredOnDiskAfterRestart: deferred messages that sit in the disk
// log behind a backlog, before and after a restart, count in
// Stats.Deferred and not in DiskDepth or Depth.
func TestDeferredOnDiskAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		q := open(t, dir, spillq.Options{})
		ctx := context.Background()
		const n, d = 300, 4
		for i := 0; i < n; i++ {
			if err := q.Put(ctx, body(i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < d; i++ {
			if err := q.PutWith(ctx, body(n+i), channel.PutOptions{Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
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
