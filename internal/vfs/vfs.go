// Package vfs is the file-system seam of this module: every file the
// queue's packages write or read goes through an [FS], the operating
// system's ([OS]) unless a test gives another. It holds the two a test
// gives: [MemFS], an in-memory file system that can lose power
// ([MemFS.CrashClone] keeps only what was fsynced), and [ErrorFS], which
// fails the calls a test picks.
//
// The package is internal: the interfaces are the queue's own (positional
// reads and writes, a directory fsync, a lock), and a program outside the
// module has no use for them but tests of its own file system, which the
// queue does not promise to support.
package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FS is the seam through which the queue touches the disk. Paths are full
// paths.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Remove(name string) error
	// RemoveAll removes name and everything under it; a name that does
	// not exist is not an error.
	RemoveAll(name string) error
	Rename(oldName, newName string) error
	ReadDir(dir string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	MkdirAll(dir string, perm fs.FileMode) error
	// SyncDir makes a directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on name, creating it
	// with perm; it returns an error wrapping ErrLocked if another holder
	// has it.
	Lock(name string, perm fs.FileMode) (io.Closer, error)
}

// File is the subset of *os.File the queue uses. Writes are positional, so
// the queue owns every offset and never depends on a file's seek position.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Close() error
}

// Mapper is implemented by files that can be preallocated and mapped
// (the OS's on Linux, and a MemFS made by NewCrashableMappedMem). The
// queue's append path uses it when every file of the active segment has
// it, and falls back to write(2) otherwise.
type Mapper interface {
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

// ReadMapper is implemented by files that can be mapped shared and
// read-only.
type ReadMapper interface {
	// MapRead maps the first n bytes of the file shared and read-only; n
	// may reach past the end of the file, where no byte may be touched.
	MapRead(n int) ([]byte, error)
}

// Puncher is implemented by files whose blocks can be freed without
// changing their size (a hole punched), on Linux.
type Puncher interface {
	PunchHole(off, n int64) error
}

// ErrLocked is what FS.Lock wraps when another holder has the lock. It is
// diskqueue.ErrLocked, the same value, hence the text: a user meets it
// from diskqueue.Open.
var ErrLocked = errors.New("diskqueue: directory is locked by another open queue")

// OS is the operating system's file system.
var OS FS = osFS{}

// Or returns fsys, or OS if it is nil: what an Options field left zero
// means.
func Or(fsys FS) FS {
	if fsys == nil {
		return OS
	}
	return fsys
}

// ReadFile reads the whole file name.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(0)
	if info, err := f.Stat(); err == nil {
		size = max(info.Size(), 0)
	}
	b := make([]byte, size)
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) {
		return nil, err
	}
	return b[:n], nil
}

// MkdirAllSynced is MkdirAll that also makes the new directories durable:
// it fsyncs the parent of each directory it creates, so that a power cut
// after it returns cannot take away a directory whose files were fsynced
// since (a file's fsync covers its data, not the entry of the directory
// that holds it). Directories that existed cost a Stat each, up to the
// first that exists.
func MkdirAllSynced(fsys FS, dir string, perm fs.FileMode) error {
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break // there, or MkdirAll says what is wrong
		}
		made = append(made, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return err
	}
	// Outermost first: each parent's entry is durable before the one
	// below it is synced.
	for i := len(made) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(made[i])); err != nil {
			return err
		}
	}
	return nil
}
