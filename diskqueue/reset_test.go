package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestResetCursor: a reset moves a cursor forward or back in one step; its
// old handle is closed; acknowledgements above the new place do not hide
// records; and a power cut at any fsync of the reset leaves the cursor at
// its old place or its new one, never gone and never past a record it had
// not acknowledged.
func TestResetCursor(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{SyncEvery: 1, MaxSegmentBytes: 1024, FS: mfs}
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			c, err := l.Cursor("c", FromNext())
			if err != nil {
				t.Fatal(err)
			}
			// Holds every segment, so c can move back over them.
			if _, err := l.Cursor("hold", FromNext()); err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if err := l.Put(ctx, fmt.Appendf(nil, "record-%03d", i)); err != nil {
					t.Fatal(err)
				}
			}
			// Acknowledge 0..59, out of order at the end: 50..59 before
			// 40..49, so the bitmap holds bits above the floor for a while.
			var recs []Record
			for range 60 {
				rec, err := c.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, rec)
			}
			for _, r := range append(append(append([]Record{}, recs[:40]...), recs[50:]...), recs[40:50]...) {
				if err := c.Ack(r.Seq); err != nil {
					t.Fatal(err)
				}
			}
			// Back to 30: 30..99 again, the acknowledged ones included.
			var cuts []*memFS
			mfs.Locked(func() {
				mfs.OnSync = func(op, _ string, _ bool) { cuts = append(cuts, mfs.CrashCloneLocked()) }
			})
			if err := l.ResetCursor("c", FromSeq(30)); err != nil {
				t.Fatalf("ResetCursor: %v", err)
			}
			mfs.Locked(func() {
				mfs.OnSync = nil
				cuts = append(cuts, mfs.CrashCloneLocked()) // just after: the new place
			})
			if _, err := c.Read(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("Read on the old handle: %v, want ErrClosed", err)
			}
			c, err = l.Cursor("c", FromNext())
			if err != nil {
				t.Fatal(err)
			}
			if d := c.Depth(); d != 70 {
				t.Errorf("Depth after reset to 30 = %d, want 70", d)
			}
			rec, err := c.Read(ctx)
			if err != nil || rec.Seq != 30 {
				t.Fatalf("first Read after reset: seq %d, %v; want 30", rec.Seq, err)
			}
			// Forward to 90: segments behind it are the cursor's no more.
			if err := l.ResetCursor("c", FromSeq(90)); err != nil {
				t.Fatal(err)
			}
			c, _ = l.Cursor("c", FromNext())
			if rec, err := c.Read(ctx); err != nil || rec.Seq != 90 || c.Depth() != 10 {
				t.Fatalf("after reset to 90: seq %d, depth %d, %v", rec.Seq, c.Depth(), err)
			}
			if err := l.ResetCursor("nope", FromNext()); !errors.Is(err, ErrNotFound) {
				t.Errorf("ResetCursor of a missing cursor: %v", err)
			}
			if len(cuts) == 0 {
				t.Fatal("the reset fsynced nothing")
			}
			for i, cut := range cuts {
				o := opts
				o.FS = cut
				l2, err := OpenLog("/q", o)
				if err != nil {
					t.Fatalf("cut %d: open: %v", i, err)
				}
				c2, err := l2.Cursor("c", FromNext())
				if err != nil {
					t.Fatalf("cut %d: %v", i, err)
				}
				// Nothing the cursor had not acknowledged (60..99) is lost
				// at any cut; after the reset returned, it is at 30.
				rec, err := c2.Read(ctx)
				if err != nil {
					t.Fatalf("cut %d: %v", i, err)
				}
				first, d := rec.Seq, c2.Depth()
				if first > 60 || d < 40 || first+uint64(d) < 100 {
					t.Errorf("cut %d: first record %d, depth %d: records the cursor had not acknowledged are lost", i, first, d)
				}
				if i == len(cuts)-1 && (first != 30 || d != 70) {
					t.Errorf("a cut after ResetCursor returned finds the cursor at %d with depth %d, want 30 and 70", first, d)
				}
				l2.Close()
				cut.Release()
			}
		})
	}
}
