package diskqueue

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"
)

// TestPowerCutKeptAcksOfLostRecords: a sync tick fsyncs the active log
// (syncNow) and then, later in the round, the acknowledgement files
// (syncAcks). A record appended between the two, read and acknowledged
// (a reader does not wait for the fsync, nor does a Put under SyncEvery 1
// return before it), has its bit made durable and not its bytes: after a
// power cut there the last segment ends before it and its bitmap has the
// bit set past that end. Open kept the bit, and the next Put, which gets
// that seq again, was taken for acknowledged: its Ack failed with
// ErrNotInFlight, and after a restart it was never delivered, though its
// Put returned under SyncEvery 1. The cut is made here from two durable
// states: the log as of a Sync, the bitmap as of the later Close.
// Found by a review of the crash recovery.
func TestPowerCutKeptAcksOfLostRecords(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			opts := Options{SyncEvery: 1000, SyncInterval: time.Hour, FS: mfs}
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 3)
			if err := q.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			cut := mfs.CrashClone() // the log durable with records 0..2
			defer cut.Release()
			if err := q.Put(ctx, fixedBody(3)); err != nil {
				t.Fatal(err)
			}
			for _, seq := range readFixed(t, q) {
				if err := q.Ack(seq); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Close(); err != nil { // fsyncs the bitmap: bits 0..3
				t.Fatal(err)
			}
			ack := "/q/" + segmentName(0, ackSuffix)
			b, err := readFile(mfs, ack)
			if err != nil {
				t.Fatal(err)
			}
			f, err := cut.OpenFile(ack, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(b, 0)
			f.Sync()
			f.Close()

			var logs lockedBuffer
			opts = Options{SyncEvery: 1, FS: cut,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			if st := q.Stats(); st.WriteSeq != 3 || st.ReadSeq != 3 {
				q.Close()
				t.Fatalf("after the cut the log ends at %d, the read cursor is %d; want 3 and 3", st.WriteSeq, st.ReadSeq)
			}
			if err := q.Put(ctx, fixedBody(3)); err != nil { // seq 3 again; SyncEvery 1: promised
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			got := readFixed(t, q)
			var ackErr error
			for _, seq := range got {
				if err := q.Ack(seq); err != nil && ackErr == nil {
					ackErr = err
				}
			}
			if len(got) != 1 || got[0] != 3 || ackErr != nil {
				t.Errorf("the record put after the cut at seq 3: delivered %v after a restart (want [3]), Ack: %v\nwarnings:\n%s", got, ackErr, logs.String())
			}
		})
	}
}

// TestPowerCutTwiceNamedBitmapComesBack: the first power cut leaves
// segment 3 empty (its name made durable, its contents never fsynced)
// and cursor n's bitmap of it holding acknowledgements (fsynced by a
// tick: records are read from the page cache). Open drops segment 3
// (dropLostTail) and removes the bitmap (removeOrphanBitmaps), with no
// fsync of the cursor's directory; appends go on in segment 0 and rotate
// to a new segment 3, whose log, and the bitmap beside it of the Queue's
// own cursor, a directory fsync makes durable before the Put returns.
// Cursor n's new bitmap is made durable in its directory only by the
// next tick's syncAcks: a second power cut before it brings back the old
// one, under which record 3, put after the first cut and promised, was
// counted acknowledged by cursor n and never delivered to it.
// Found by a review of the crash recovery.
func TestPowerCutTwiceNamedBitmapComesBack(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			opts, l, cs := namedCursorsLog(t, mfs, "n")
			c := cs[0]
			readAcking(t, c, 4, nil)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// The first cut: segment 3's files empty, cursor n's bitmap of
			// it as fsynced.
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				f, err := mfs.OpenFile("/q/"+segmentName(3, suffix), os.O_RDWR|os.O_TRUNC, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Sync()
				f.Close()
			}
			cut1 := mfs.CrashClone()
			defer cut1.Release()
			opts.FS = cut1
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Put(ctx, fixedBody(3)); err != nil { // rotates to a new segment 3
				t.Fatal(err)
			}
			cut2 := cut1.CrashClone() // the second cut, the Put returned
			defer cut2.Release()
			listing := listing(cut2, "/q/cursors/n")
			l.Close()
			var logs lockedBuffer
			opts.FS = cut2
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			l, c = openNamedCursor(t, opts, "n")
			defer l.Close()
			got := readSeqs(done, c)
			if len(got) != 1 || got[0] != 3 {
				t.Errorf("cursor n after the second cut delivers %v, want [3]\ncursor n's files at the cut:%s\nwarnings:\n%s", got, listing, logs.String())
			}
		})
	}
}

func TestCursorRegistry(t *testing.T) {
	var r cursorRegistry
	r.cursorList.Store(new([]*Cursor))
	a, b, c := &Cursor{name: "b"}, &Cursor{name: ""}, &Cursor{name: "a"}
	for _, x := range []*Cursor{a, b, c} {
		r.addCursor(x)
	}
	if got := r.cursorNames(); !slices.Equal(got, []string{"", "a", "b"}) {
		t.Errorf("cursorNames = %q", got)
	}
	if r.cursorNamed("a") != c || r.cursorNamed("x") != nil {
		t.Error("cursorNamed found the wrong cursor")
	}
	held := r.cursors // a spare's snapshot
	if got := r.removeCursor("b"); got != a {
		t.Fatalf("removeCursor = %v", got)
	}
	if r.removeCursor("b") != nil {
		t.Error("removeCursor found a cursor already removed")
	}
	if !slices.Equal(held, []*Cursor{a, b, c}) {
		t.Error("removeCursor changed the set a holder took")
	}
	if list := *r.cursorList.Load(); !slices.Equal(list, []*Cursor{b, c}) || !slices.Equal(r.cursors, list) {
		t.Errorf("after removal: cursors %v, published %v", r.cursors, list)
	}
}

// namedCursorsLog opens a log at /q on mfs, three records a segment,
// fsync per record and no sync tick, with the named cursors reading from
// the oldest, and puts records 0..3 (segments 0 and 3). It returns the
// options it opened with.
func namedCursorsLog(t *testing.T, mfs *memFS, names ...string) (Options, *Log, []*Cursor) {
	t.Helper()
	opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, SyncInterval: time.Hour, FS: mfs}
	l, err := OpenLog("/q", opts)
	if err != nil {
		t.Fatal(err)
	}
	var cs []*Cursor
	for _, name := range names {
		c, err := l.Cursor(name, FromOldest())
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for i := range 4 {
		if err := l.Put(context.Background(), fixedBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	return opts, l, cs
}
