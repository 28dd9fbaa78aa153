//go:build linux

package diskqueue

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// osFile is a real file that can also be preallocated and mapped, which
// the append path uses where the kernel offers both (see mapper).
type osFile struct{ *os.File }

func openOSFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Allocate reserves blocks for [off, off+n) and extends the file to cover
// them, so that writing there through a mapping cannot fail for lack of
// space: disk full shows here, before a record is accepted.
func (f osFile) Allocate(off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// PunchHole frees the blocks of [off, off+n); reads there return zeros.
func (f osFile) PunchHole(off, n int64) error {
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return &os.PathError{Op: "punch hole", Path: f.Name(), Err: err}
	}
	return nil
}

// Map maps the first n bytes of the file shared and writable. n may reach
// past the end of the file; only bytes inside it may be touched.
func (f osFile) Map(n int) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	return b, nil
}

// MapRead maps the first n bytes of the file shared and read-only, for
// readers: the kernel's page cache itself, so a read is a load, not a
// system call and a copy. n may reach past the end of the file; only
// bytes inside it may be touched.
func (f osFile) MapRead(n int) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	return b, nil
}

// dropPages tells the kernel a reader is done with b's pages for now:
// they leave the process's resident set and stay in the page cache (the
// mapping is shared and of a file, so nothing is lost; touching them again
// maps them again).
func dropPages(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_DONTNEED)
	}
}

func unmap(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b)
}

// prefault makes the kernel map b's pages now, so a producer copying a
// record there does not stop for a full page fault. It reads them in
// (MADV_POPULATE_READ) rather than populating them for write: pages
// populated for write are dirty, so every fsync would write the zeros ahead
// of the records back and write-protect them again. It changes no byte, so
// it is safe while producers write into the same pages. Kernels older than
// 5.14 lack it; the faults then happen on first write, as they would anyway.
func prefault(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_POPULATE_READ)
	}
}

// notSupported reports an error meaning the file system cannot preallocate
// or map, so the queue falls back to writing with write(2).
func notSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL)
}
