//go:build linux

package vfs

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// osFile is a real file that can also be preallocated, mapped and punched,
// which the queue's append path and retention use where the kernel offers
// them (see Mapper, Puncher).
type osFile struct{ *os.File }

// openOSFile opens name as os.OpenFile does, less what a regular file
// does not need: os.OpenFile tries every file on the runtime's poller,
// which refuses regular files, at the cost of four fcntl calls and an
// epoll_ctl on every open; os.NewFile of a blocking descriptor asks one
// fcntl. A ReadAt over more segments than stay open opens two files, so
// this is ten system calls of the twenty such a lookup made.
func openOSFile(name string, flag int, perm fs.FileMode) (File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == nil {
			return osFile{os.NewFile(uintptr(fd), name)}, nil
		}
		if err != unix.EINTR {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
	}
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
func (f osFile) Map(n int) ([]byte, error) { return f.mmap(n, unix.PROT_READ|unix.PROT_WRITE) }

// MapRead maps the first n bytes of the file shared and read-only, for
// readers: the kernel's page cache itself, so a read is a load, not a
// system call and a copy. n may reach past the end of the file; only
// bytes inside it may be touched.
func (f osFile) MapRead(n int) ([]byte, error) { return f.mmap(n, unix.PROT_READ) }

// mmap maps the first n bytes of the file shared, with protection prot.
func (f osFile) mmap(n, prot int) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, n, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	return b, nil
}

// SyncMapped writes back the dirty pages of [0, n) and waits for them and
// for the metadata needed to read them (msync MS_SYNC is the kernel's
// fdatasync of that range). A whole-file fsync would also write back the
// pages prefault dirtied ahead of the records, which writeback then
// write-protects, so each would take a fault again on its first record.
func (f osFile) SyncMapped(m []byte, n int64) error {
	if err := unix.Msync(m[:n], unix.MS_SYNC); err != nil {
		return &os.PathError{Op: "msync", Path: f.Name(), Err: err}
	}
	return nil
}
