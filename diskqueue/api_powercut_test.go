package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// After Cursor.Empty returns, a power cut does not bring the emptied
// records back to that cursor, and the other cursor keeps all of its own:
// Empty stores the cursor with an fsync before it returns.
func TestCursorEmptySurvivesPowerCut(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{SyncEvery: 1, MaxSegmentBytes: 512, FS: mfs}
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			a, err := l.Cursor("a", FromOldest())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Cursor("b", FromOldest()); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < 60; i++ {
				if err := l.Put(ctx, []byte(fmt.Sprintf("record-%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Empty(); err != nil {
				t.Fatal(err)
			}
			cut := mfs.CrashClone()
			defer cut.Release()
			opts.FS = cut
			l2, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatalf("open after a power cut: %v", err)
			}
			defer l2.Close()
			for _, c := range []struct {
				name  string
				depth int64
			}{{"a", 0}, {"b", 60}} {
				cur, err := l2.Cursor(c.name, FromOldest())
				if err != nil {
					t.Fatal(err)
				}
				if got := cur.Depth(); got != c.depth {
					t.Errorf("after a power cut cursor %s has Depth %d, want %d", c.name, got, c.depth)
				}
			}
		})
	}
}

// PutBatch under SyncEvery 1 returns only once every record it stored is
// on stable storage: a power cut right after keeps them all.
func TestPutBatchSurvivesPowerCut(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{SyncEvery: 1, MaxSegmentBytes: 1024, FS: mfs}
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var batch [][]byte
			for i := 0; i < 100; i++ {
				batch = append(batch, []byte(fmt.Sprintf("record-%d", i)))
			}
			if n, err := l.PutBatch(context.Background(), batch); n != len(batch) || err != nil {
				t.Fatalf("PutBatch: %d, %v", n, err)
			}
			cut := mfs.CrashClone()
			defer cut.Release()
			opts.FS = cut
			l2, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatalf("open after a power cut: %v", err)
			}
			defer l2.Close()
			for i, want := range batch {
				rec, err := l2.ReadAt(uint64(i))
				if err != nil || string(rec.Body) != string(want) {
					t.Fatalf("after a power cut record %d is %q, %v; want %q", i, rec.Body, err, want)
				}
			}
		})
	}
}

// The drop-when-full policy stores the cursors before it removes a
// segment's files, so a power cut at any directory fsync or cursor store
// during drops leaves a log that opens without complaint, in which each
// cursor reads exactly its Depth of records, in order, with the bodies put:
// the holding cursor lost none it had not acknowledged. With pinned, the
// holding cursor keeps seq 0 in flight, so the dropped segments behind it
// leave tombstones.
func TestDropWhenFullSurvivesPowerCut(t *testing.T) {
	for _, kind := range memFSKinds() {
		for _, pinned := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pinned=%v", kind.name, pinned), func(t *testing.T) {
				mfs := kind.new(t)
				var cuts []*memFS
				mfs.OnSync = func(op, name string, changed bool) {
					if changed && (op == "dirsync" || filepath.Base(name) == cursorName) {
						cuts = append(cuts, mfs.CrashCloneLocked())
					}
				}
				opts := Options{SyncEvery: 1, MaxSegmentBytes: 1024, MaxDiskBytes: 8 << 10, FS: mfs}
				l, err := OpenLog("/q", opts)
				if err != nil {
					t.Fatal(err)
				}
				hold, _ := l.Cursor("hold", FromOldest())
				drop, _ := l.Cursor("drop", FromOldest())
				drop.SetDropWhenFull(true)
				var start int // cuts before are of the log's creation
				mfs.Locked(func() { start = len(cuts) })
				ctx := context.Background()
				var held []uint64 // read by hold, acknowledged 40 records later
				for i := 0; i < 600; i++ {
					if err := l.Put(ctx, dropBody(i)); err != nil {
						t.Fatalf("Put %d: %v", i, err)
					}
					rec, err := hold.Read(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if pinned && rec.Seq == 0 {
						continue
					}
					held = append(held, rec.Seq)
					if len(held) > 40 {
						if err := hold.Ack(held[0]); err != nil {
							t.Fatal(err)
						}
						held = held[1:]
					}
				}
				if drop.Stats().Dropped == 0 {
					t.Fatal("nothing was dropped")
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				mfs.OnSync = nil
				for _, cut := range cuts[:start] {
					cut.Release()
				}
				cuts = cuts[start:]
				if len(cuts) < 20 {
					t.Fatalf("only %d cuts", len(cuts))
				}
				for k, cut := range cuts {
					checkDropCut(t, k, cut, opts)
				}
				t.Logf("%d cuts", len(cuts))
			})
		}
	}
}

func dropBody(i int) []byte { return []byte(fmt.Sprintf("record-%06d", i)) }

func checkDropCut(t *testing.T, k int, cut *memFS, opts Options) {
	t.Helper()
	defer cut.Release()
	var logs lockedBuffer
	opts.FS = cut
	opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := OpenLog("/q", opts)
	if err != nil {
		t.Fatalf("cut %d: open: %v", k, err)
	}
	defer l.Close()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range l.Cursors() {
		c, err := l.Cursor(name, FromOldest())
		if err != nil {
			t.Fatal(err)
		}
		depth := c.Depth()
		prev, read := int64(-1), int64(0)
		for {
			rec, err := c.Read(done)
			if errors.Is(err, context.Canceled) {
				break
			}
			if err != nil {
				t.Fatalf("cut %d: cursor %s: Read: %v", k, name, err)
			}
			if int64(rec.Seq) <= prev || !bytes.Equal(rec.Body, dropBody(int(rec.Seq))) {
				t.Fatalf("cut %d: cursor %s: seq %d (%q) after %d", k, name, rec.Seq, rec.Body, prev)
			}
			prev = int64(rec.Seq)
			read++
		}
		if read != depth {
			t.Fatalf("cut %d: cursor %s read %d records, its Depth was %d (stats %+v)", k, name, read, depth, l.Stats())
		}
	}
	// A cut may lose segments made and not yet fsynced (and say so); it
	// must not leave damage, gaps or a cursor out of the log.
	for _, bad := range []string{"damage", "skipped", "missing", "past the end", "no valid cursor"} {
		if s := logs.String(); strings.Contains(s, bad) {
			t.Fatalf("cut %d: warnings: %s", k, s)
		}
	}
}
