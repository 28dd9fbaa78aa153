package diskqueue

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
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

// TestAckFileMadeAfterItsSegmentIsDurable: syncAcks (the tick, and Close)
// fsyncs acknowledgement files but never their directory, so one created
// after its segment's files were made durable stays out of the directory
// after a power cut, however often it was fsynced: its acknowledgements
// are lost, and their records delivered again. ackFor creates one for a
// segment found without (written before acknowledgement files existed,
// format v1, or whose file a crash lost), and createSegment's can miss
// the directory fsync that covers its log when a tombstone's fsync comes
// between the two (TestPowerCutAtEverySync meets that about once in 100
// runs). Nothing sets dirDirty for such a file.
// Found by a review of the crash recovery.
func TestAckFileMadeAfterItsSegmentIsDurable(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{SyncEvery: 1, FS: mfs}
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 3)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// The segment as a format v1 queue has it: no bitmap.
			if err := mfs.Remove("/q/" + segmentName(0, ackSuffix)); err != nil {
				t.Fatal(err)
			}
			mfs.SyncDir("/q")

			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := q.Read(done); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Ack(1); err != nil {
				t.Fatal(err)
			}
			if err := q.Close(); err != nil { // fsyncs the bitmap
				t.Fatal(err)
			}
			c := mfs.CrashClone() // a power cut after Close returned
			defer c.Release()
			listing := listing(c, "/q")
			opts.FS = c
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			got := readSeqs(done, q)
			if len(got) != 2 || got[0] != 0 || got[1] != 2 {
				t.Errorf("after a power cut Read gave %v, want 0 and 2: 1 was acknowledged before Close\nfiles at the cut:%s", got, listing)
			}
		})
	}
}

// TestRetiredBitmapFsyncedWithItsName: a bitmap the floor passes while it
// owes an fsync is closed and handed to the writer goroutine, whose next
// round fsyncs it (retirePassed), tick or not. A named cursor's bitmaps
// live in its own directory, which only syncAcks fsynced (newFiles): one
// made since the last tick (here by the cursor's registration, segment 0
// active) was fsynced with its acknowledgements while its name was still
// not durable, and a power cut there lost them with it: records 0..2,
// acknowledged before that fsync, were delivered again. A second cursor
// that reads nothing keeps segment 0 from being deleted.
// Found by a review of the crash recovery.
func TestRetiredBitmapFsyncedWithItsName(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			opts, l, cs := namedCursorsLog(t, mfs, "n", "m")
			n := cs[0]
			var cut *memFS
			ack0 := "/q/cursors/n/" + segmentName(0, ackSuffix)
			mfs.Locked(func() {
				mfs.OnSync = func(op, name string, _ bool) {
					if op == "fsync" && name == ack0 && cut == nil {
						cut = mfs.CrashCloneLocked() // the power cut
					}
				}
			})
			readAcking(t, n, 3, nil)            // the floor passes segment 0
			if err := l.Sync(ctx); err != nil { // a round: retirePassed
				t.Fatal(err)
			}
			var c *memFS
			mfs.Locked(func() { c, mfs.OnSync = cut, nil })
			l.Close()
			if c == nil {
				t.Fatal("no fsync of cursor n's bitmap of segment 0")
			}
			defer c.Release()
			listing := listing(c, "/q/cursors/n")
			opts.FS = c
			l, n = openNamedCursor(t, opts, "n")
			defer l.Close()
			got := readSeqs(done, n)
			if len(got) != 1 || got[0] != 3 {
				t.Errorf("after a power cut at the fsync of its bitmap of segment 0, cursor n delivers %v, want [3]: 0..2 were acknowledged before it\ncursor n's files at the cut:%s", got, listing)
			}
		})
	}
}

// fakeFile is a file that only counts its fsyncs and closes.
type fakeFile struct {
	file
	syncs, closes int
}

func (f *fakeFile) Sync() error  { f.syncs++; return nil }
func (f *fakeFile) Close() error { f.closes++; return nil }

// testSeg is a segment of n records from base, sealed and written out
// unless writing.
func testSeg(base, n uint64, writing bool) *segment {
	s := &segment{base: base}
	s.setExtent(fileHeaderSize, base+n)
	s.sealed.Store(!writing)
	s.writing.Store(writing)
	return s
}

// openState is a segment's state with an open bitmap on a fakeFile.
func openState(seg *segment, dirty bool) (*segAcks, *fakeFile) {
	f := &fakeFile{}
	return &segAcks{seg: seg, ack: &ackFile{region: region{f: f}, dirty: dirty}}, f
}

func TestBitmapCacheListsOnceAndSaysWhenToSweep(t *testing.T) {
	b := bitmapCache{limit: 2}
	var states []*segAcks
	for i := range 3 {
		sa, _ := openState(testSeg(uint64(10*i), 10, false), false)
		states = append(states, sa)
	}
	for _, sa := range []*segAcks{states[0], states[0], states[1]} {
		if b.list(sa) {
			t.Fatal("a sweep is due before the list outgrows its bound")
		}
	}
	if len(b.open) != 2 || b.sweepDue() {
		t.Fatalf("listed %d (a state listed twice?), sweep due %v", len(b.open), b.sweepDue())
	}
	if !b.list(states[2]) || !b.sweepDue() {
		t.Fatal("the list outgrew its bound and no sweep is due")
	}
	mem := bitmapCache{limit: 2, memOnly: true}
	if mem.list(states[0]); len(mem.open) != 0 {
		t.Fatal("a read-only view's bitmaps, never closed, were listed")
	}
}

func TestBitmapCacheSweep(t *testing.T) {
	b := bitmapCache{limit: 1}
	keep, _ := openState(testSeg(0, 10, false), false)
	clean, cleanF := openState(testSeg(10, 10, false), false)
	dirty, dirtyF := openState(testSeg(20, 10, false), true)
	stale, staleF := openState(testSeg(30, 10, false), false)
	closed, _ := openState(testSeg(40, 10, false), false)
	closed.ack = nil
	for _, sa := range []*segAcks{keep, clean, dirty, stale, closed} {
		b.list(sa)
	}
	b.sweep(func(sa *segAcks) bool { return sa != stale }, func(sa *segAcks) bool { return sa == keep })
	if !slices.Equal(b.open, []*segAcks{keep}) || !keep.listed || keep.ack == nil {
		t.Fatalf("kept %v, want only the needed one, open", b.open)
	}
	for _, sa := range []*segAcks{clean, dirty, stale, closed} {
		if sa.listed {
			t.Errorf("segment %d is still marked listed", sa.seg.base)
		}
	}
	if clean.ack != nil || cleanF.closes != 1 {
		t.Errorf("a clean bitmap not needed: ack %v, %d closes; want closed at once", clean.ack, cleanF.closes)
	}
	if dirty.ack != nil || dirtyF.closes != 0 || !slices.Equal(b.retired, []file{dirtyF}) {
		t.Errorf("a dirty bitmap: %d closes, retired %v; want left to the writer to fsync and close", dirtyF.closes, b.retired)
	}
	if stale.ack == nil || staleF.closes != 0 {
		t.Error("a state no longer the cursor's had its bitmap closed by the sweep (its owner closes it)")
	}
	if b.sweepAt != 1+b.limit || b.sweepDue() {
		t.Errorf("sweepAt %d, want the kept plus the bound", b.sweepAt)
	}
	if got := b.takeRetired(); len(got) != 1 || b.retired != nil {
		t.Errorf("takeRetired gave %v and left %v", got, b.retired)
	}
}

func TestBitmapCacheRetire(t *testing.T) {
	b := bitmapCache{limit: 4}
	seg := testSeg(0, 10, true)
	sa, f := openState(seg, true)
	b.retire(sa)
	b.retire(sa)
	if sa.ack == nil || len(b.passed) != 1 || !sa.passed {
		t.Fatalf("a segment being sealed: ack %v, passed %d; want it kept open and listed once", sa.ack, len(b.passed))
	}
	b.retryPassed()
	if len(b.passed) != 1 || sa.ack == nil {
		t.Fatal("retryPassed let go of a segment still being sealed")
	}
	seg.writing.Store(false)
	b.retryPassed()
	if len(b.passed) != 0 || sa.passed || sa.ack != nil || !slices.Equal(b.retired, []file{file(f)}) {
		t.Fatalf("sealed: passed %d, ack %v, retired %v; want the dirty bitmap retired", len(b.passed), sa.ack, b.retired)
	}

	// Without fsyncs, or while syncAcks fsyncs, the choice differs.
	noSync := bitmapCache{noSync: true}
	sa, f = openState(testSeg(0, 10, false), true)
	if noSync.shelve(sa); f.closes != 1 || len(noSync.retired) != 0 {
		t.Error("under NoSync a dirty bitmap was not closed at once")
	}
	syncing := bitmapCache{syncing: true}
	sa, f = openState(testSeg(0, 10, false), false)
	if syncing.shelve(sa); f.closes != 0 || len(syncing.retired) != 1 {
		t.Error("a clean bitmap shelved while syncAcks fsyncs was closed before its fsync")
	}
	mem := &segAcks{seg: testSeg(0, 10, false), ack: &ackFile{mem: true}}
	if b.retire(mem); mem.ack == nil {
		t.Error("a read-only view's bitmap, in memory only, was retired")
	}
}
