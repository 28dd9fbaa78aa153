package diskqueue

import (
	"context"
	"fmt"
	"testing"
)

// After Cursor.Empty returns, a power cut does not bring the emptied
// records back to that cursor, and the other cursor keeps all of its own:
// Empty stores the cursor with an fsync before it returns.
func TestCursorEmptySurvivesPowerCut(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{SyncEvery: 1, MaxSegmentBytes: 512, fsForTesting: mfs}
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
			cut := mfs.crashClone()
			defer cut.release()
			opts.fsForTesting = cut
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
			opts := Options{SyncEvery: 1, MaxSegmentBytes: 1024, fsForTesting: mfs}
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
			cut := mfs.crashClone()
			defer cut.release()
			opts.fsForTesting = cut
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
