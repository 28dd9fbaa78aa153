package diskqueue_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// Rotation renames a spare segment the writer made ahead into place; no
// spare file is left after Close, and every record is read back in order.
func TestSpareSegments(t *testing.T) {
	dir := t.TempDir()
	opts := diskqueue.Options{MaxSegmentBytes: 16 << 10}
	l := openLog(t, dir, opts)
	openCursor(t, l, "c", diskqueue.FromOldest())
	ctx := context.Background()
	for i := 0; i < 4000; i++ {
		if err := l.Put(ctx, body(i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			// A writer round, in which it makes the next spare.
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := l.Stats(); st.WritePath == "mmap" && diskqueue.SparesUsed(l) == 0 {
		t.Fatalf("%d segments, none from a spare", st.Segments)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{"next.*", "cursors/c/next.*"} {
		if left, _ := filepath.Glob(filepath.Join(dir, pattern)); len(left) > 0 {
			t.Fatalf("spare files left after Close: %v", left)
		}
	}
	l = openLog(t, dir, opts)
	defer l.Close()
	c := openCursor(t, l, "c", diskqueue.FromNext())
	readN(t, c, 0, 4000, true)
	if rep, err := diskqueue.Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", err, rep.Problems)
	}
}

// Spare files a crash left behind are removed at Open.
func TestSpareLeftoversRemoved(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, diskqueue.Options{})
	openCursor(t, l, "c", diskqueue.FromOldest())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	junk := []string{"next.log", "next.index", "next.timeindex", "next.ack", "cursors/c/next.ack"}
	for _, name := range junk {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l = openLog(t, dir, diskqueue.Options{})
	defer l.Close()
	for _, name := range junk {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed at Open", name, err)
		}
	}
}
