package diskqueue

import (
	"bytes"
	"fmt"
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
	// Lock takes an exclusive, non-blocking lock on name, creating it
	// with perm; it returns ErrLocked if another holder has it.
	Lock(name string, perm fs.FileMode) (io.Closer, error)
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
	// SyncMapped makes the first n bytes of the file durable, however
	// they were written (through m, a mapping Map returned, or with
	// WriteAt), with the metadata needed to read them back: fdatasync
	// confined to that range. Dirty pages past n stay for the kernel to
	// write back when it likes.
	SyncMapped(m []byte, n int64) error
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

func (osFS) Lock(name string, perm fs.FileMode) (io.Closer, error) { return lockFile(name, perm) }

// readHead returns the first n bytes of the file name, or as many as it
// has: what Open and Verify look at of a file's header alone.
func readHead(fsys fileSystem, name string, n int) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := f.ReadAt(b, 0)
	if err != nil && k < n && err != io.EOF {
		return nil, err
	}
	return b[:k], nil
}

// readFile reads a whole file through the file-system seam.
func readFile(fsys fileSystem, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, max(fileSize(f), 0))
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) {
		return nil, err
	}
	return b[:n], nil
}

// writeAtomically replaces path with header+body: temporary file, fsync,
// rename, directory fsync.
func (l *Log) writeAtomically(path string, header, body []byte) error {
	tmp := path + tmpSuffix
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, l.opts.FileMode)
	if err != nil {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	_, err = f.WriteAt(append(header, body...), 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, path)
	}
	if err == nil && !l.opts.NoSync {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		l.fs.Remove(tmp)
		return fmt.Errorf("diskqueue: open: write %s: %w", path, err)
	}
	return nil
}

func allZero(b []byte) bool {
	return len(bytes.Trim(b, "\x00")) == 0
}

// copyBytes writes b to a new file name.
func (l *Log) copyBytes(name string, b []byte) error {
	f, err := l.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, l.opts.FileMode)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rewriteTail writes b at off and cuts the file there.
func rewriteTail(f file, off int64, b []byte) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Truncate(off + int64(len(b)))
}

// fileSize is f's size, or -1 for no file or an error.
func fileSize(f file) int64 {
	if f == nil {
		return -1
	}
	info, err := f.Stat()
	if err != nil {
		return -1
	}
	return info.Size()
}
