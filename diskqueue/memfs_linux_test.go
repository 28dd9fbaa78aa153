//go:build linux

package diskqueue

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// memfdStore keeps a memFS file in a memfd: shmem, the memory a
// MAP_SHARED|MAP_ANONYMOUS mapping is made of, but with a file descriptor,
// so that it can be mapped any number of times at any length, every
// mapping shares the pages pread and pwrite see (MAP_SHARED), and
// truncation and fallocate act on mappings as on a file on disk: a page
// cut off by Truncate faults (SIGBUS) when touched through a mapping, and
// reads as zeros once Allocate or Truncate extends the file over it again.
// Neither the store nor its mappings are Go memory, so the race detector
// does not watch the queue's deliberate unsynchronized stores into its
// mappings, and the package's unmap (unix.Munmap of a unix.Mmap) unmaps
// them for real.
type memfdStore struct{ fd int }

func newMemfdStore(init []byte) (memStore, error) {
	fd, err := unix.MemfdCreate("diskqueue-memfs", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	s := &memfdStore{fd: fd}
	if _, err := s.WriteAt(init, 0); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *memfdStore) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Pread(s.fd, b[n:], off+int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, os.NewSyscallError("pread", err)
		case k == 0:
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

func (s *memfdStore) WriteAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Pwrite(s.fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, os.NewSyscallError("pwrite", err)
		}
		n += k
	}
	return n, nil
}

func (s *memfdStore) Truncate(size int64) error {
	return os.NewSyscallError("ftruncate", unix.Ftruncate(s.fd, size))
}

func (s *memfdStore) Size() int64 {
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		return -1
	}
	return st.Size
}

func (s *memfdStore) Close() error { return unix.Close(s.fd) }

// mappedFile is a handle of a mapped memFS: a memFile that can also be
// preallocated, mapped and punched, as osFile on Linux.
type mappedFile struct{ *memFile }

// fd returns the handle's memfd, or why it cannot be used. The caller
// holds f.fs.mu.
func (f mappedFile) fd(op string, write bool) (int, error) {
	switch {
	case f.closed:
		return -1, &fs.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	case write && f.readOnly:
		// What the kernel says to fallocate or a writable shared mmap
		// of a file opened read-only.
		return -1, &fs.PathError{Op: op, Path: f.name, Err: unix.EBADF}
	}
	return f.n.store.(*memfdStore).fd, nil
}

// Allocate extends the file to cover [off, off+n) with blocks reserved
// (fallocate mode 0, as osFile.Allocate).
func (f mappedFile) Allocate(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	fd, err := f.fd("fallocate", true)
	if err != nil {
		return err
	}
	for {
		err := unix.Fallocate(fd, 0, off, n)
		if err != unix.EINTR {
			if err != nil {
				return &fs.PathError{Op: "fallocate", Path: f.name, Err: err}
			}
			return nil
		}
	}
}

// PunchHole frees [off, off+n), keeping the size; reads there see zeros.
func (f mappedFile) PunchHole(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	fd, err := f.fd("punch hole", true)
	if err != nil {
		return err
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return &fs.PathError{Op: "punch hole", Path: f.name, Err: err}
	}
	return nil
}

// Map maps the first n bytes of the file shared and writable, as
// osFile.Map: the mapping is the file's contents, and stays so after the
// handle is closed, until unmap.
func (f mappedFile) Map(n int) ([]byte, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	fd, err := f.fd("mmap", true)
	if err != nil {
		return nil, err
	}
	b, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, &fs.PathError{Op: "mmap", Path: f.name, Err: err}
	}
	return b, nil
}

// SyncMapped makes [0, n) and the file's size what a power cut keeps, as
// msync MS_SYNC of that range does: past n the durable bytes stay what the
// last sync left there (zeros where the file has grown since), because
// nothing forces the kernel to have written back what lies there.
func (f mappedFile) SyncMapped(_ []byte, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	size := f.n.store.Size()
	if n > size {
		return &fs.PathError{Op: "msync", Path: f.name, Err: unix.ENOMEM}
	}
	kept := make([]byte, size)
	copy(kept, f.n.synced)
	if _, err := f.n.store.ReadAt(kept[:n], 0); err != nil && err != io.EOF {
		return &fs.PathError{Op: "msync", Path: f.name, Err: err}
	}
	changed := !bytes.Equal(kept, f.n.synced)
	f.n.synced = kept
	if f.fs.onSync != nil {
		f.fs.onSync("fsync", f.name, changed)
	}
	return nil
}

// MapRead maps the first n bytes of the file shared and read-only, as
// osFile.MapRead; a read-only handle may.
func (f mappedFile) MapRead(n int) ([]byte, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	fd, err := f.fd("mmap", false)
	if err != nil {
		return nil, err
	}
	b, err := unix.Mmap(fd, 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, &fs.PathError{Op: "mmap", Path: f.name, Err: err}
	}
	return b, nil
}

var (
	memfdOnce sync.Once
	memfdErr  error
)

// newMappedMemFS is a memFS whose files can be mapped (mapper, puncher),
// so a queue on it appends and acknowledges through mappings as it does on
// a real Linux file system. Its stores are released when t ends (after
// the test's deferred Closes). It skips t where memfd_create is missing.
func newMappedMemFS(t testing.TB) *memFS {
	memfdOnce.Do(func() {
		var s memStore
		if s, memfdErr = newMemfdStore(nil); memfdErr == nil {
			s.Close()
		}
	})
	if memfdErr != nil {
		t.Skipf("no memfd for a mapped memFS: %v", memfdErr)
	}
	m := newMemFS()
	m.newStore = newMemfdStore
	m.wrap = func(f *memFile) file { return mappedFile{f} }
	t.Cleanup(m.release)
	return m
}

// memFSKinds are the memFS flavours a power-cut test runs on: on Linux
// both the write(2) path and the mapped one.
func memFSKinds() []memFSKind {
	return []memFSKind{
		{name: "write", new: func(testing.TB) *memFS { return newMemFS() }, path: "write"},
		{name: "mmap", new: newMappedMemFS, path: "mmap"},
	}
}

// TestMappedMemFS checks that a mapped memFS behaves as a file system with
// MAP_SHARED mappings does, since the power-cut tests rely on it: a
// mapping is the file's contents, Truncate and Allocate act on it, and
// what is stored through it becomes durable at the file's fsync (or a
// SyncMapped whose range covers it) only.
func TestMappedMemFS(t *testing.T) {
	m := newMappedMemFS(t)
	m.MkdirAll("/d", 0o755)
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mf, ok := f.(mapper)
	if _, punch := f.(puncher); !ok || !punch {
		t.Fatalf("a mapped memFS's file is %T: not a mapper and puncher", f)
	}
	const page = 4096
	if err := mf.Allocate(0, 2*page); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(f); got != 2*page {
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
	if err := unmap(b2); err != nil {
		t.Fatalf("unmap: %v", err)
	}

	// Durability: nothing before the directory and the file are synced.
	cloneHas := func(want string, off int64) bool {
		t.Helper()
		c := m.crashClone()
		defer c.release()
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
	if err := f.(puncher).PunchHole(0, page); err != nil {
		t.Fatal(err)
	}
	if b[100] != 0 || fileSize(f) != 2*page {
		t.Fatalf("after punching a hole the mapping holds %q, the file is %d bytes", b[100:119], fileSize(f))
	}
	// unix.Munmap finds only mappings unix.Mmap made: nil says it did.
	if err := unmap(b); err != nil {
		t.Fatalf("unmap: %v", err)
	}

	ro, err := m.OpenFile("/d/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.(mapper).Map(page); !errors.Is(err, unix.EBADF) {
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
