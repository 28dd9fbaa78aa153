package vfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// TestErrorFSFailsTheNthCall: the armed kind's nth call fails, with a short
// write if asked; other kinds pass; sticky keeps failing until Heal.
func TestErrorFSFailsTheNthCall(t *testing.T) {
	mem := NewCrashableMem()
	mem.MkdirAll("/d", 0o700)
	e := &ErrorFS{FS: mem, ShortWrite: true}
	f, err := e.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.(Mapper); ok {
		t.Fatal("an ErrorFS file is a Mapper: the queue would write past the faults through a mapping")
	}
	e.Arm(OpWrite, 2, syscall.ENOSPC, false)
	if _, err := f.WriteAt([]byte("abcd"), 0); err != nil {
		t.Fatalf("first write: %v", err)
	}
	n, err := f.WriteAt([]byte("efgh"), 4)
	if !errors.Is(err, syscall.ENOSPC) || n != 2 {
		t.Fatalf("second write: %d, %v; want a short write of 2 and ENOSPC", n, err)
	}
	if _, err := f.WriteAt([]byte("ij"), 6); err != nil {
		t.Fatalf("third write, not sticky: %v", err)
	}
	if err := e.SyncDir("/d"); err != nil {
		t.Fatalf("a call of another kind: %v", err)
	}
	if got := content(t, mem, "/d/f"); got != "abcdefij" {
		t.Fatalf("the file holds %q", got)
	}
	e.Arm(OpSync, 1, syscall.EIO, true)
	for i := 0; i < 3; i++ {
		if err := f.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("sticky fsync %d: %v", i, err)
		}
	}
	if e.Fired() != 3 {
		t.Fatalf("Fired = %d, want 3", e.Fired())
	}
	e.Heal()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after Heal: %v", err)
	}
	e.Arm(OpRemove, 1, syscall.EROFS, false)
	if err := e.RemoveAll("/d"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("RemoveAll: %v, want EROFS", err)
	}
}

// TestErrorFSZeroValueIsTheOS: an ErrorFS with no FS works on the OS.
func TestErrorFSZeroValueIsTheOS(t *testing.T) {
	var e ErrorFS
	name := t.TempDir() + "/f"
	write(t, &e, name, "on disk", true)
	if b, err := os.ReadFile(name); err != nil || string(b) != "on disk" {
		t.Fatalf("the OS has %q, %v", b, err)
	}
}
