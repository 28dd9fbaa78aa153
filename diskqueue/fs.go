package diskqueue

import (
	"io"
	"io/fs"
	"os"
)

// fileSystem is the seam through which the queue touches the disk, so tests
// can fail any operation of any kind (see errorfs_test.go). Paths are full
// paths.
type fileSystem interface {
	OpenFile(name string, flag int, perm fs.FileMode) (file, error)
	Remove(name string) error
	Rename(oldName, newName string) error
	ReadDir(dir string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	MkdirAll(dir string, perm fs.FileMode) error
	// SyncDir makes a directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on name, creating it; it
	// returns ErrLocked if another holder has it.
	Lock(name string) (io.Closer, error)
}

// file is the subset of *os.File the queue uses. Writes are positional, so
// the queue owns every offset and never depends on a file's seek position.
type file interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Close() error
}

// mapper is implemented by files that can be preallocated and mapped
// (the real file system on Linux). The append path uses it when every
// file of the active segment has it, and falls back to write(2) otherwise.
type mapper interface {
	// Allocate reserves space for [off, off+n) and extends the file to
	// cover it; ENOSPC shows here.
	Allocate(off, n int64) error
	// Map maps the first n bytes of the file, shared and writable.
	Map(n int) ([]byte, error)
}

// puncher is implemented by files whose blocks can be freed without
// changing their size (a hole punched), on Linux.
type puncher interface {
	PunchHole(off, n int64) error
}

// osFS is the real file system.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	return openOSFile(name, flag, perm)
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(oldName, newName string) error        { return os.Rename(oldName, newName) }
func (osFS) ReadDir(dir string) ([]fs.DirEntry, error)   { return os.ReadDir(dir) }
func (osFS) Stat(name string) (fs.FileInfo, error)       { return os.Stat(name) }
func (osFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Lock(name string) (io.Closer, error) { return lockFile(name) }
