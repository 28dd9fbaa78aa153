//go:build linux

package vfs

import (
	"errors"
	"io"
	"os"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"
)

// newMapped is a mapped MemFS released when t ends; it skips t where
// memfd_create is missing.
func newMapped(t *testing.T) *MemFS {
	m, err := NewCrashableMappedMem()
	if err != nil {
		t.Skipf("no memfd: %v", err)
	}
	t.Cleanup(m.Release)
	return m
}

// size is f's size.
func size(t *testing.T, f File) int64 {
	t.Helper()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestMappedMemFS checks that a mapped MemFS behaves as a file system with
// MAP_SHARED mappings does, since the power-cut tests rely on it: a
// mapping is the file's contents, Truncate and Allocate act on it, and
// what is stored through it becomes durable at the file's fsync (or a
// SyncMapped whose range covers it) only.
func TestMappedMemFS(t *testing.T) {
	m := newMapped(t)
	m.MkdirAll("/d", 0o755)
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mf, ok := f.(Mapper)
	if _, punch := f.(Puncher); !ok || !punch {
		t.Fatalf("a mapped MemFS's file is %T: not a mapper and puncher", f)
	}
	const page = 4096
	if err := mf.Allocate(0, 2*page); err != nil {
		t.Fatal(err)
	}
	if got := size(t, f); got != 2*page {
		t.Fatalf("after Allocate the file is %d bytes, want %d", got, 2*page)
	}
	b, err := mf.Map(4 * page) // reaching past the end, as mapRegion does
	if err != nil {
		t.Fatal(err)
	}
	copy(b[100:], "through the mapping")
	if _, err := f.WriteAt([]byte("through WriteAt"), page+10); err != nil {
		t.Fatal(err)
	}
	read := func(off int64, n int) string {
		t.Helper()
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
		return string(buf)
	}
	if got := read(100, 19); got != "through the mapping" {
		t.Fatalf("ReadAt sees %q where the mapping was written", got)
	}
	if got := string(b[page+10 : page+25]); got != "through WriteAt" {
		t.Fatalf("the mapping sees %q where WriteAt wrote", got)
	}
	b2, err := mf.Map(page)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b2[100:119]); got != "through the mapping" {
		t.Fatalf("a second mapping sees %q", got)
	}
	if err := unix.Munmap(b2); err != nil {
		t.Fatalf("unmap: %v", err)
	}

	// Durability: nothing before the directory and the file are synced.
	cloneHas := func(want string, off int64) bool {
		t.Helper()
		c := m.CrashClone()
		defer c.Release()
		cf, err := c.OpenFile("/d/f", os.O_RDONLY, 0)
		if err != nil {
			return false
		}
		defer cf.Close()
		buf := make([]byte, len(want))
		_, err = cf.ReadAt(buf, off)
		return err == nil && string(buf) == want
	}
	if cloneHas("through the mapping", 100) {
		t.Fatal("a power cut kept a file whose directory was never synced")
	}
	m.SyncDir("/d")
	if cloneHas("through the mapping", 100) {
		t.Fatal("a power cut kept bytes never fsynced")
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if !cloneHas("through the mapping", 100) || !cloneHas("through WriteAt", page+10) {
		t.Fatal("fsync did not make what was stored through the mapping durable")
	}
	copy(b[100:], "after the fsync....")
	if !cloneHas("through the mapping", 100) {
		t.Fatal("a power cut kept a store through the mapping made after the last fsync")
	}
	// SyncMapped keeps what lies before its end, and only that.
	copy(b[page+10:], "past the range..")
	if err := mf.SyncMapped(b, page); err != nil {
		t.Fatal(err)
	}
	if !cloneHas("after the fsync....", 100) {
		t.Fatal("SyncMapped did not make a store before its end durable")
	}
	if !cloneHas("through WriteAt", page+10) {
		t.Fatal("SyncMapped made a store past its end durable")
	}

	// Truncate cuts the mapping too: a page past the end faults, and reads
	// as zeros once the file is extended over it again.
	if err := f.Truncate(page); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 1), page+10); err != io.EOF {
		t.Fatalf("ReadAt past a truncated end: %v, want EOF", err)
	}
	if !faults(func() { b[page+10] = 1 }) {
		t.Fatal("a store through the mapping past the truncated end did not fault")
	}
	if err := mf.Allocate(page, page); err != nil {
		t.Fatal(err)
	}
	if b[page+10] != 0 || string(b[100:119]) != "after the fsync...." {
		t.Fatalf("after extending again the mapping holds %q and %q", b[page+10:page+25], b[100:119])
	}
	if err := f.(Puncher).PunchHole(0, page); err != nil {
		t.Fatal(err)
	}
	if b[100] != 0 || size(t, f) != 2*page {
		t.Fatalf("after punching a hole the mapping holds %q, the file is %d bytes", b[100:119], size(t, f))
	}
	// unix.Munmap finds only mappings unix.Mmap made: nil says it did.
	if err := unix.Munmap(b); err != nil {
		t.Fatalf("unmap: %v", err)
	}

	ro, err := m.OpenFile("/d/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.(Mapper).Map(page); !errors.Is(err, unix.EBADF) {
		t.Fatalf("mapping a read-only handle writable: %v, want EBADF", err)
	}
}

// faults reports whether f faulted on memory (SIGBUS or SIGSEGV).
func faults(f func()) (faulted bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { faulted = recover() != nil }()
	f()
	return false
}
