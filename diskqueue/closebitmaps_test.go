package diskqueue

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// TestClosedBitmapsKeepAcks: with room for one open bitmap, a cursor that
// has read every record of a long backlog and acknowledges them in random
// order closes each segment's bitmap once all of it is acknowledged (its
// fsync done first) and opens bitmaps again as its floor crosses them;
// nothing acknowledged is delivered again after a Close and Open, and the
// records left unacknowledged are, in order.
func TestClosedBitmapsKeepAcks(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 1024, RetainBytes: 1 << 30, SyncInterval: 10 * time.Millisecond, openBitmapsForTesting: 1, openSealedForTesting: 2}
	ctx := context.Background()
	const n = 3000
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := q.Read(rctx); err != nil {
			t.Fatal(err)
		}
	}
	if segs := q.Stats().Segments; segs < 50 {
		t.Fatalf("%d segments, want many", segs)
	}
	left := func(seq int) bool { return seq%301 == 5 }
	order := rand.New(rand.NewPCG(3, 4)).Perm(n)
	for k, seq := range order {
		if left(seq) {
			continue
		}
		if err := q.Ack(uint64(seq)); err != nil {
			t.Fatalf("Ack %d: %v", seq, err)
		}
		if k%500 == 0 {
			if err := q.Sync(ctx); err != nil { // a writer round: it closes bitmaps too
				t.Fatal(err)
			}
		}
	}
	// Within a few sync ticks only the bitmaps of segments holding the
	// records left in flight, and those at the read position and being
	// written, are open.
	openBitmaps := func() int {
		q.c.readMu.Lock()
		defer q.c.readMu.Unlock()
		k := 0
		for _, sa := range q.c.segs {
			if sa.ack != nil {
				k++
			}
		}
		return k
	}
	want := n/301 + 1 + 6
	for deadline := time.Now().Add(10 * time.Second); openBitmaps() > want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bitmaps open after every record but %d was acknowledged, want at most %d", openBitmaps(), n/301+1, want)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if q, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for seq := 0; seq < n; seq++ {
		if !left(seq) {
			continue
		}
		rec, err := q.Read(rctx)
		if err != nil || rec.Seq != uint64(seq) {
			t.Fatalf("after reopening: Read = seq %d, %v; want %d", rec.Seq, err, seq)
		}
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if rec, err := q.Read(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("after reopening: Read = seq %d, %v; want nothing more", rec.Seq, err)
	}
}
