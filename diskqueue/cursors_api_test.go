package diskqueue_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// Deleting the cursor that holds the log back frees the segments only it
// needed, removes its files, and it is not there after a reopen.
func TestDeleteCursor(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	idle := openCursor(t, l, "idle", diskqueue.FromOldest())
	putN(t, l, 0, 200)
	readN(t, a, 0, 200, true)
	readN(t, idle, 0, 5, false) // in flight when deleted
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Segments < 5 {
		t.Fatalf("Segments = %d with the idle cursor at 0, want all of them", st.Segments)
	}
	if err := l.DeleteCursor("idle"); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteCursor("idle"); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Errorf("second DeleteCursor: %v, want ErrNotFound", err)
	}
	if _, err := idle.Read(context.Background()); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Read on a deleted cursor: %v, want ErrClosed", err)
	}
	if err := idle.Ack(0); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Ack on a deleted cursor: %v, want ErrClosed", err)
	}
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Segments != 1 {
		t.Errorf("Segments = %d after the idle cursor was deleted, want 1", st.Segments)
	}
	if _, err := os.Stat(filepath.Join(dir, "cursors", "idle")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted cursor's directory: %v, want it gone", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, smallSegments)
	defer l.Close()
	if got := l.Cursors(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("after reopen Cursors() = %v, want [a]", got)
	}
}

// A cursor directory left without its cursor file (a crash during its
// creation or deletion) is removed at Open, as are a cursor's bitmaps of
// segments no longer in the log.
func TestCursorLeftoversRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	putN(t, l, 0, 10)
	readN(t, a, 0, 10, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(dir, "cursors", "half")
	if err := os.MkdirAll(half, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "00000000000000000000.ack"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "cursors", "a", "00000000000000999999.ack")
	if err := os.WriteFile(orphan, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, smallSegments)
	defer l.Close()
	if got := l.Cursors(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Cursors() = %v, want [a]", got)
	}
	for _, p := range []string{half, orphan} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", p, err)
		}
	}
}

func TestCursorNames(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{})
	defer l.Close()
	for _, name := range []string{"", ".", "..", "a/b", "a b", string(make([]byte, 65)), "é"} {
		if _, err := l.Cursor(name, diskqueue.FromNext()); !errors.Is(err, diskqueue.ErrBadCursorName) {
			t.Errorf("Cursor(%q): %v, want ErrBadCursorName", name, err)
		}
	}
	if _, err := l.Cursor("orders-v1.retry_2", diskqueue.FromNext()); err != nil {
		t.Errorf("Cursor with a good name: %v", err)
	}
}
