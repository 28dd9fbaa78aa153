//go:build linux

package vfs

import (
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// memfdStore keeps a MemFS file in a memfd: shmem, the memory a
// MAP_SHARED|MAP_ANONYMOUS mapping is made of, but with a file descriptor,
// so that it can be mapped any number of times at any length, every
// mapping shares the pages pread and pwrite see (MAP_SHARED), and
// truncation and fallocate act on mappings as on a file on disk: a page
// cut off by Truncate faults (SIGBUS) when touched through a mapping, and
// reads as zeros once Allocate or Truncate extends the file over it again.
// Neither the store nor its mappings are Go memory, so the race detector
// does not watch the queue's deliberate unsynchronized stores into its
// mappings, and unix.Munmap unmaps them for real.
type memfdStore struct{ fd int }

func newMemfdStore(init []byte) (memStore, error) {
	fd, err := unix.MemfdCreate("vfs-memfs", unix.MFD_CLOEXEC)
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

// mappedFile is a handle of a mapped MemFS: a memFile that can also be
// preallocated, mapped and punched, as the OS's on Linux.
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
// (fallocate mode 0, as the OS's Allocate).
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
// the OS's Map: the mapping is the file's contents, and stays so after the
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
	if n > f.n.store.Size() {
		return &fs.PathError{Op: "msync", Path: f.name, Err: unix.ENOMEM}
	}
	return f.syncLocked("msync", n)
}

// MapRead maps the first n bytes of the file shared and read-only, as
// the OS's MapRead; a read-only handle may.
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

// NewCrashableMappedMem returns an empty MemFS whose files can be mapped
// (Mapper, ReadMapper, Puncher), so a queue on it appends and
// acknowledges through mappings as it does on a real Linux file system,
// and whose power cuts keep what was stored through a mapping only once
// an fsync or a SyncMapped covered it. Each file opened holds a memfd
// until Release. It fails where memfd_create is missing.
func NewCrashableMappedMem() (*MemFS, error) {
	s, err := newMemfdStore(nil)
	if err != nil {
		return nil, err
	}
	s.Close()
	m := NewCrashableMem()
	m.newStore = newMemfdStore
	m.wrap = func(f *memFile) File { return mappedFile{f} }
	return m, nil
}
