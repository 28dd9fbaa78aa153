package diskqueue_test

import (
	"context"
	"sync"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestLogCursorStats: one entry per cursor, by name, with its own depth
// and position; a cursor deleted is gone from it, and asking creates none.
func TestLogCursorStats(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{})
	defer l.Close()
	ctx := context.Background()
	b := openCursor(t, l, "b", diskqueue.FromNext())
	for range 5 {
		if err := l.Put(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	openCursor(t, l, "a", diskqueue.FromSeq(2))
	rec, err := b.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(rec.Seq); err != nil {
		t.Fatal(err)
	}
	st := l.CursorStats()
	if len(st) != 2 || st[0].Name != "a" || st[1].Name != "b" {
		t.Fatalf("CursorStats = %+v, want a then b", st)
	}
	if st[0].Depth != 3 || st[0].ReadSeq != 2 || st[1].Depth != 4 || st[1].ReadSeq != 1 || st[1].Acks != 1 {
		t.Errorf("CursorStats = %+v; want a at 2 with 3 to read, b at 1 with 4", st)
	}
	if err := l.DeleteCursor("a"); err != nil {
		t.Fatal(err)
	}
	if st := l.CursorStats(); len(st) != 1 || st[0].Name != "b" {
		t.Errorf("after DeleteCursor: %+v", st)
	}
	if names := l.Cursors(); len(names) != 1 {
		t.Errorf("CursorStats created a cursor: %v", names)
	}
}

// TestDepthNeverNegative: Depth, read without a lock while records are put
// and acknowledged as fast as they come, never counts below zero. It read
// the log's end before the floor, so a floor risen meanwhile past that
// end (records put and acknowledged between the two loads) made it
// negative (by thousands, with readers spinning). A race: it failed in
// every run before the fix, with and without -race, but it cannot be made
// certain.
func TestDepthNeverNegative(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{NoSync: true})
	defer l.Close()
	c := openCursor(t, l, "c", diskqueue.FromNext())
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if d := c.Depth(); d < 0 {
					t.Errorf("Depth = %d", d)
					cancel()
				}
			}
		})
	}
	body := []byte("x")
	for i := 0; i < 20000 && ctx.Err() == nil; i++ {
		putReadAck(t, ctx, l, c, body)
	}
	cancel()
	wg.Wait()
}
