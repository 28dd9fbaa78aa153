package diskqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// Cursor.Empty drops one cursor's backlog, in flight or not: the other
// cursor keeps every record, the segments only the emptied one held go at
// once, a read waiting after it gets only what is put next, and all of it
// holds after a reopen.
func TestCursorEmpty(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	putN(t, l, 0, 200)
	held := readN(t, a, 0, 5, false) // in flight when emptied
	readN(t, b, 0, 60, true)
	ctx := context.Background()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.FirstSeq != 0 {
		t.Fatalf("FirstSeq = %d before Empty with cursor a at 0, want 0", st.FirstSeq)
	}

	if err := a.Empty(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Depth != 0 || st.InFlight != 0 || st.ReadSeq != 200 {
		t.Errorf("emptied cursor: Depth %d, InFlight %d, ReadSeq %d; want 0, 0, 200", st.Depth, st.InFlight, st.ReadSeq)
	}
	if err := a.Ack(held[0].Seq); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Errorf("Ack of a record in flight before Empty: %v, want ErrNotInFlight", err)
	}
	if st := b.Stats(); st.Depth != 140 || st.ReadSeq != 60 {
		t.Errorf("other cursor after Empty: Depth %d, ReadSeq %d; want 140, 60", st.Depth, st.ReadSeq)
	}
	st := l.Stats()
	if st.FirstSeq == 0 || st.FirstSeq > 60 {
		t.Errorf("FirstSeq = %d after Empty, want the segments below b's 60 deleted", st.FirstSeq)
	}
	if st.Depth != 140 || st.ReadSeq != 60 {
		t.Errorf("log Stats after Empty: Depth %d, ReadSeq %d; want the slowest cursor's 140, 60", st.Depth, st.ReadSeq)
	}
	expectNothing(t, a)

	// A Read waiting on the emptied cursor gets the next record put.
	got := make(chan diskqueue.Record, 1)
	go func() {
		rec, err := a.Read(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- rec
	}()
	putN(t, l, 200, 1)
	if rec := <-got; string(rec.Body) != string(body(200)) {
		t.Fatalf("Read after Empty: got %q, want %q", rec.Body, body(200))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, dir, smallSegments)
	defer l.Close()
	a = openCursor(t, l, "a", diskqueue.FromOldest())
	b = openCursor(t, l, "b", diskqueue.FromOldest())
	// 200 was handed out, not acknowledged: it comes back, nothing older.
	readN(t, a, 200, 1, true)
	expectNothing(t, a)
	readN(t, b, 60, 141, true)
	expectNothing(t, b)
	if err := b.Empty(); err != nil {
		t.Errorf("Empty of a cursor with nothing left: %v", err)
	}
}

// A Read waiting (or about to wait) when Empty runs goes on waiting, and
// gets the first record put after.
func TestCursorEmptyBlockedRead(t *testing.T) {
	l := openLog(t, t.TempDir(), smallSegments)
	defer l.Close()
	c := openCursor(t, l, "c", diskqueue.FromOldest())
	putN(t, l, 0, 50)
	readN(t, c, 0, 50, false) // all in flight: the next Read waits
	got := make(chan diskqueue.Record, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		rec, err := c.Read(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- rec
	}()
	<-waiting
	if err := c.Empty(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.InFlight != 0 || st.Depth != 0 {
		t.Fatalf("after Empty: InFlight %d, Depth %d; want 0, 0", st.InFlight, st.Depth)
	}
	putN(t, l, 50, 1)
	if rec := <-got; rec.Seq != 50 || string(rec.Body) != string(body(50)) {
		t.Fatalf("blocked Read after Empty got seq %d %q, want 50 %q", rec.Seq, rec.Body, body(50))
	}
}

func TestCursorEmptyErrors(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	putN(t, l, 0, 10)
	if err := l.DeleteCursor("a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Empty(); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Empty of a deleted cursor: %v, want ErrClosed", err)
	}
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Empty(); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Empty on a closed log: %v, want ErrClosed", err)
	}
	ro, err := diskqueue.OpenReadOnly(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	c, err := ro.Cursor("b", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Empty(); !errors.Is(err, diskqueue.ErrReadOnly) {
		t.Errorf("Empty on a read-only log: %v, want ErrReadOnly", err)
	}
}

// dropOpts make segments of about 26 records and a budget of about six.
var dropOpts = diskqueue.Options{MaxSegmentBytes: 1024, MaxDiskBytes: 8 << 10}

// putAndKeepUp puts records from..from+n, c reading and acknowledging
// each right after.
func putAndKeepUp(t *testing.T, l *diskqueue.Log, c *diskqueue.Cursor, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := l.Put(context.Background(), body(i)); err != nil {
			t.Fatalf("Put %d: %v (stats %+v)", i, err, l.Stats())
		}
		readN(t, c, i, 1, true)
	}
}

// With one cursor holding and one dropping when full, Puts go on past
// MaxDiskBytes: the dropping cursor loses whole segments from its oldest,
// counted exactly (those in flight too), then reads on in order from the
// next segment kept; the holding cursor loses nothing; a reopen is
// consistent.
func TestDropWhenFull(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, dropOpts)
	hold := openCursor(t, l, "hold", diskqueue.FromOldest())
	drop := openCursor(t, l, "drop", diskqueue.FromOldest())
	drop.SetDropWhenFull(true)
	putN(t, l, 0, 5)
	held := readN(t, drop, 0, 5, false)
	for _, rec := range held[:2] {
		if err := drop.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	readN(t, hold, 0, 5, true)
	putAndKeepUp(t, l, hold, 5, 1995)

	st := drop.Stats()
	floor := st.ReadSeq
	if floor < 1000 {
		t.Fatalf("dropping cursor's ReadSeq %d after 2000 records in a budget of about 150", floor)
	}
	if st.Dropped != int64(floor)-2 {
		t.Errorf("Dropped = %d with ReadSeq %d and 2 acknowledged, want %d", st.Dropped, floor, floor-2)
	}
	if st.InFlight != 0 || st.Depth != int64(2000-floor) {
		t.Errorf("dropping cursor: InFlight %d, Depth %d; want 0, %d", st.InFlight, st.Depth, 2000-floor)
	}
	if err := drop.Ack(held[3].Seq); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Errorf("Ack of a dropped record that was in flight: %v, want ErrNotInFlight", err)
	}
	if got := l.Stats().DroppedRecords; got != st.Dropped {
		t.Errorf("Log DroppedRecords = %d, the cursor's Dropped %d", got, st.Dropped)
	}
	if hs := hold.Stats(); hs.Dropped != 0 || hs.Depth != 0 || hs.Acks != 2000 {
		t.Errorf("holding cursor: Dropped %d, Depth %d, Acks %d; want 0, 0, 2000", hs.Dropped, hs.Depth, hs.Acks)
	}
	if first := l.Stats().FirstSeq; first != floor {
		t.Errorf("FirstSeq %d, want the dropping cursor's ReadSeq %d (a segment start)", first, floor)
	}
	// The dropping cursor reads on from the first segment kept.
	readN(t, drop, int(floor), 10, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := diskqueue.Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify after drops: %v %v", err, rep.Problems)
	}
	l = openLog(t, dir, dropOpts)
	defer l.Close()
	drop = openCursor(t, l, "drop", diskqueue.FromOldest())
	if st := drop.Stats(); st.ReadSeq != floor+10 || st.Depth != int64(2000-floor-10) || st.Dropped != 0 {
		t.Errorf("after reopen the dropping cursor has ReadSeq %d, Depth %d, Dropped %d; want %d, %d, 0", st.ReadSeq, st.Depth, st.Dropped, floor+10, 2000-floor-10)
	}
	readN(t, drop, int(floor)+10, int(2000-floor-10), true)
	expectNothing(t, drop)
}

// While the holding cursor still needs the oldest segment, a full log
// refuses Puts as it does without the policy; once it has acknowledged
// that segment, the dropping cursor gives it up and Puts go on.
func TestDropWhenFullHoldBehind(t *testing.T) {
	l := openLog(t, t.TempDir(), dropOpts)
	defer l.Close()
	hold := openCursor(t, l, "hold", diskqueue.FromOldest())
	drop := openCursor(t, l, "drop", diskqueue.FromOldest())
	drop.SetDropWhenFull(true)
	ctx := context.Background()
	n := 0
	var err error
	for ; n < 10000; n++ {
		if err = l.Put(ctx, body(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, diskqueue.ErrDiskFull) {
		t.Fatalf("Put with the holding cursor behind: %v after %d, want ErrDiskFull", err, n)
	}
	if d := drop.Stats().Dropped; d != 0 {
		t.Fatalf("Dropped = %d while the holding cursor needed everything", d)
	}
	readN(t, hold, 0, 60, true) // at least the first segment
	if err := l.Put(ctx, body(n)); err != nil {
		t.Fatalf("Put once the holding cursor acknowledged the oldest segment: %v", err)
	}
	st := drop.Stats()
	if st.Dropped == 0 || st.Dropped > 60 || st.ReadSeq != uint64(st.Dropped) {
		t.Errorf("dropping cursor: Dropped %d, ReadSeq %d; want the records of the segments below the holding cursor's 60", st.Dropped, st.ReadSeq)
	}
	readN(t, drop, int(st.ReadSeq), n+1-int(st.ReadSeq), true)
	readN(t, hold, 60, n+1-60, true)
}

// A record held by the holding cursor pins the oldest segment, not the
// log: the dropping cursor gives up later segments, which leave
// tombstones, reads the pinned segment and then what is kept, and a
// reopen counts the same.
func TestDropWhenFullBehindPinnedSegment(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, dropOpts)
	hold := openCursor(t, l, "hold", diskqueue.FromOldest())
	drop := openCursor(t, l, "drop", diskqueue.FromOldest())
	drop.SetDropWhenFull(true)
	putN(t, l, 0, 1)
	readN(t, hold, 0, 1, false) // seq 0 stays in flight
	putAndKeepUp(t, l, hold, 1, 999)

	st := drop.Stats()
	if st.Dropped == 0 || st.ReadSeq != 0 || st.Depth+st.Dropped != 1000 {
		t.Fatalf("dropping cursor: Dropped %d, ReadSeq %d, Depth %d; want some dropped, 0, and the two adding up to 1000", st.Dropped, st.ReadSeq, st.Depth)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := diskqueue.Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify after drops behind a pinned segment: %v %v", err, rep.Problems)
	}
	l = openLog(t, dir, dropOpts)
	defer l.Close()
	drop = openCursor(t, l, "drop", diskqueue.FromOldest())
	if got := drop.Depth(); got != st.Depth {
		t.Fatalf("after reopen the dropping cursor's Depth is %d, was %d", got, st.Depth)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	prev, read := int64(-1), int64(0)
	for {
		rec, err := drop.Read(ctx)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if int64(rec.Seq) <= prev || string(rec.Body) != string(body(int(rec.Seq))) {
			t.Fatalf("dropping cursor read seq %d (%q) after %d", rec.Seq, rec.Body, prev)
		}
		prev = int64(rec.Seq)
		read++
		if err := drop.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if read != st.Depth {
		t.Errorf("dropping cursor read %d records, its Depth said %d", read, st.Depth)
	}
	hold = openCursor(t, l, "hold", diskqueue.FromOldest())
	readN(t, hold, 0, 1, true) // delivered again after the reopen
	expectNothing(t, hold)
}

// With everything in the active segment (MaxSegmentBytes over the
// budget), the active segment is rolled so the dropping cursor can give it
// up.
func TestDropWhenFullRollsActive(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{MaxSegmentBytes: 64 << 10, MaxDiskBytes: 8 << 10})
	defer l.Close()
	hold := openCursor(t, l, "hold", diskqueue.FromOldest())
	drop := openCursor(t, l, "drop", diskqueue.FromOldest())
	drop.SetDropWhenFull(true)
	putAndKeepUp(t, l, hold, 0, 1000)
	st := drop.Stats()
	if st.Dropped == 0 || int64(st.ReadSeq) != st.Dropped {
		t.Fatalf("dropping cursor: Dropped %d, ReadSeq %d; want whole rolled segments dropped", st.Dropped, st.ReadSeq)
	}
	readN(t, drop, int(st.ReadSeq), 1000-int(st.ReadSeq), true)
}

// Producers, a holding consumer and a dropping one that lags, all at once
// (with BlockWhenFull, so the holding consumer's lag makes Puts wait, not
// fail): the holding cursor gets every record once and in order; the
// dropping cursor gets records in order, and each record is either
// acknowledged by it or counted in its Dropped, never both.
func TestDropWhenFullConcurrent(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	opts := dropOpts
	opts.BlockWhenFull = true
	l := openLog(t, t.TempDir(), opts)
	defer l.Close()
	hold := openCursor(t, l, "hold", diskqueue.FromOldest())
	drop := openCursor(t, l, "drop", diskqueue.FromOldest())
	drop.SetDropWhenFull(true)
	const producers, each = 2, 1500
	ctx := context.Background()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := l.Put(ctx, []byte(fmt.Sprintf("%d-%d", p, i))); err != nil {
					t.Errorf("Put: %v", err)
					return
				}
			}
		}()
	}
	ticks := make(chan struct{}, producers*each)
	holdDone := make(chan struct{})
	go func() {
		defer close(holdDone)
		defer close(ticks)
		last := map[int]int{0: -1, 1: -1}
		for n := 0; n < producers*each; n++ {
			rec, err := hold.Read(ctx)
			if err != nil {
				t.Errorf("holding cursor: Read: %v", err)
				return
			}
			var p, i int
			fmt.Sscanf(string(rec.Body), "%d-%d", &p, &i)
			if i != last[p]+1 {
				t.Errorf("holding cursor: producer %d record %d after %d", p, i, last[p])
				return
			}
			last[p] = i
			if err := hold.Ack(rec.Seq); err != nil {
				t.Errorf("holding cursor: Ack: %v", err)
				return
			}
			if n%5 == 0 {
				ticks <- struct{}{}
			}
		}
	}()
	// The dropping consumer reads one record for every five the holding
	// one does, then catches up once everything is put.
	var acked int64
	prev := int64(-1)
	readOne := func(rctx context.Context) bool {
		rec, err := drop.Read(rctx)
		if err != nil {
			return false
		}
		if int64(rec.Seq) <= prev {
			t.Errorf("dropping cursor: seq %d after %d", rec.Seq, prev)
		}
		prev = int64(rec.Seq)
		switch err := drop.Ack(rec.Seq); {
		case err == nil:
			acked++
		case !errors.Is(err, diskqueue.ErrNotInFlight):
			t.Errorf("dropping cursor: Ack: %v", err)
		}
		return true
	}
	// Once the holding one is done no Put drops anything more, and the
	// dropping one may have fewer records left than ticks.
	tickCtx, stop := context.WithCancel(ctx)
	go func() { <-holdDone; stop() }()
	for range ticks {
		readOne(tickCtx)
	}
	wg.Wait()
	<-holdDone
	done, cancel := context.WithCancel(ctx)
	cancel()
	for readOne(done) {
	}
	st := drop.Stats()
	if st.Dropped == 0 {
		t.Errorf("the dropping cursor lagged behind a budget of about 150 records and dropped none")
	}
	if acked+st.Dropped != producers*each || st.InFlight != 0 || st.Depth != 0 {
		t.Errorf("dropping cursor: %d acknowledged + %d dropped, want %d; InFlight %d, Depth %d", acked, st.Dropped, producers*each, st.InFlight, st.Depth)
	}
	if hs := hold.Stats(); hs.Acks != producers*each || hs.Dropped != 0 {
		t.Errorf("holding cursor: Acks %d, Dropped %d", hs.Acks, hs.Dropped)
	}
}

// With retention keeping consumed segments, a full log deletes those
// first: the dropping cursor, which keeps up, loses nothing.
func TestDropWhenFullRetainedFirst(t *testing.T) {
	opts := dropOpts
	opts.RetainBytes = 1 << 30
	l := openLog(t, t.TempDir(), opts)
	defer l.Close()
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	b.SetDropWhenFull(true)
	for i := 0; i < 1000; i++ {
		if err := l.Put(context.Background(), body(i)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		readN(t, a, i, 1, true)
		readN(t, b, i, 1, true)
	}
	if d := b.Stats().Dropped; d != 0 {
		t.Errorf("Dropped = %d by a cursor that kept up", d)
	}
}
