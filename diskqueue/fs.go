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

// osFS is the real file system.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
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
