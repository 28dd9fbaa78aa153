package vfs

import (
	"io"
	"io/fs"
	"sync"
)

// Op names a kind of file-system call ErrorFS can fail.
type Op string

// The calls ErrorFS can fail. OpRemove covers Remove and RemoveAll.
const (
	OpOpen     Op = "open"
	OpWrite    Op = "write"
	OpSync     Op = "sync"
	OpTruncate Op = "truncate"
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpSyncDir  Op = "syncdir"
	OpRead     Op = "read"
	OpMkdir    Op = "mkdir"
)

// ErrorFS wraps a file system (FS; nil means OS) and fails calls of one
// kind: the Nth one and, if sticky, every one after it, until healed. The
// zero value passes every call to the OS.
type ErrorFS struct {
	FS FS
	// ShortWrite makes a failing write write half its bytes first.
	ShortWrite bool

	mu     sync.Mutex
	op     Op
	nth    int   // fail when count reaches nth (1-based); 0 disables
	sticky bool  // keep failing after the first
	err    error // what to fail with
	count  int
	fired  int
}

// Arm makes the nth call of kind op from now on fail with err, and every
// one after it too if sticky. It resets the counts.
func (e *ErrorFS) Arm(op Op, nth int, err error, sticky bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.op, e.nth, e.err, e.sticky, e.count, e.fired = op, nth, err, sticky, 0, 0
}

// Heal stops failing calls.
func (e *ErrorFS) Heal() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nth = 0
}

// Fired is how many calls failed since Arm.
func (e *ErrorFS) Fired() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fired
}

func (e *ErrorFS) fail(op Op) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nth == 0 || op != e.op {
		return nil
	}
	e.count++
	if e.count == e.nth || (e.sticky && e.count > e.nth) {
		e.fired++
		return e.err
	}
	return nil
}

func (e *ErrorFS) inner() FS { return Or(e.FS) }

func (e *ErrorFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if err := e.fail(OpOpen); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f, err := e.inner().OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: name}, nil
}

func (e *ErrorFS) Rename(oldName, newName string) error {
	if err := e.fail(OpRename); err != nil {
		return &fs.PathError{Op: "rename", Path: oldName, Err: err}
	}
	return e.inner().Rename(oldName, newName)
}

func (e *ErrorFS) Remove(name string) error {
	if err := e.fail(OpRemove); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return e.inner().Remove(name)
}

func (e *ErrorFS) RemoveAll(name string) error {
	if err := e.fail(OpRemove); err != nil {
		return &fs.PathError{Op: "removeall", Path: name, Err: err}
	}
	return e.inner().RemoveAll(name)
}

func (e *ErrorFS) SyncDir(dir string) error {
	if err := e.fail(OpSyncDir); err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return e.inner().SyncDir(dir)
}

func (e *ErrorFS) MkdirAll(dir string, perm fs.FileMode) error {
	if err := e.fail(OpMkdir); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	return e.inner().MkdirAll(dir, perm)
}

func (e *ErrorFS) ReadDir(dir string) ([]fs.DirEntry, error) { return e.inner().ReadDir(dir) }
func (e *ErrorFS) Stat(name string) (fs.FileInfo, error)     { return e.inner().Stat(name) }

func (e *ErrorFS) Lock(name string, perm fs.FileMode) (io.Closer, error) {
	return e.inner().Lock(name, perm)
}

// errorFile is a handle of an ErrorFS. It hides the wrapped file's
// Mapper and Puncher, so a queue on an ErrorFS appends with write(2),
// every write of it a call ErrorFS can fail.
type errorFile struct {
	File
	fs   *ErrorFS
	name string
}

func (f *errorFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.fs.fail(OpWrite); err != nil {
		n := 0
		if f.fs.ShortWrite && len(b) > 1 {
			n, _ = f.File.WriteAt(b[:len(b)/2], off)
		}
		return n, &fs.PathError{Op: "write", Path: f.name, Err: err}
	}
	return f.File.WriteAt(b, off)
}

func (f *errorFile) ReadAt(b []byte, off int64) (int, error) {
	if err := f.fs.fail(OpRead); err != nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
	}
	return f.File.ReadAt(b, off)
}

func (f *errorFile) Sync() error {
	if err := f.fs.fail(OpSync); err != nil {
		return &fs.PathError{Op: "fsync", Path: f.name, Err: err}
	}
	return f.File.Sync()
}

func (f *errorFile) Truncate(n int64) error {
	if err := f.fs.fail(OpTruncate); err != nil {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: err}
	}
	return f.File.Truncate(n)
}
