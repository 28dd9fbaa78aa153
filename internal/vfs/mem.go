package vfs

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory file system that keeps, for a simulated power cut,
// only what was made durable: a file's contents as of its last fsync, and
// a directory's names as of its last directory fsync. CrashClone returns
// that durable state as a new file system, the way a machine that lost
// power would find its disk; KillClone returns what a killed process
// leaves (everything written). Directories themselves are not part of the
// model: one made (MkdirAll) or removed (RemoveAll) is so at once, durably.
//
// NewCrashableMem's files live in Go memory and cannot be mapped, so a
// queue on it takes the write(2) path. On Linux NewCrashableMappedMem
// keeps each file in a memfd instead, and its handles implement Mapper,
// ReadMapper and Puncher, so a queue on it takes the mapped path as on a
// real disk.
type MemFS struct {
	mu      sync.Mutex
	names   map[string]*memNode // the namespace now
	durable map[string]*memNode // the namespace as of each directory's last fsync
	dirs    map[string]bool
	locks   map[string]bool
	nodes   []*memNode // every node given a store, for Release

	// newStore makes the storage of a file holding init (Go memory by
	// default); wrap makes the handle OpenFile returns (the memFile itself
	// by default). A mapped MemFS sets both.
	newStore func(init []byte) (memStore, error)
	wrap     func(*memFile) File

	// OnSync, if set, is called with the file system's lock held after
	// every file fsync and directory fsync: op is "fsync" or "dirsync",
	// name the file or directory, changed whether the durable state is
	// different now. A test cuts the power there (CrashCloneLocked). Set
	// it before the file system is used, or inside Locked.
	OnSync func(op, name string, changed bool)
	// OnRead, if set before the file system is used, is called before
	// every ReadAt, without the lock held, so a test can hold a reader
	// there.
	OnRead func(name string, off int64)
}

// memStore holds what reads of one file see now.
type memStore interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Size() int64
	Close() error
}

// memNode is one file (an inode): what reads see now (store, made from
// synced on first open), and what a power cut keeps (synced, replaced
// whole at every fsync and never changed in place, so clones share it).
type memNode struct {
	store  memStore
	synced []byte
}

// NewCrashableMem returns an empty MemFS whose files live in Go memory.
// The root directory "/" exists.
func NewCrashableMem() *MemFS {
	return &MemFS{names: map[string]*memNode{}, durable: map[string]*memNode{}, dirs: map[string]bool{"/": true}, locks: map[string]bool{}}
}

// heapStore is a file in Go memory.
type heapStore struct{ data []byte }

func newHeapStore(init []byte) (memStore, error) { return &heapStore{data: slices.Clone(init)}, nil }

func (s *heapStore) ReadAt(b []byte, off int64) (int, error) {
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	n := copy(b, s.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (s *heapStore) WriteAt(b []byte, off int64) (int, error) {
	if end := off + int64(len(b)); end > int64(len(s.data)) {
		s.data = append(s.data, make([]byte, end-int64(len(s.data)))...)
	}
	return copy(s.data[off:], b), nil
}

func (s *heapStore) Truncate(size int64) error {
	if size <= int64(len(s.data)) {
		s.data = s.data[:size]
	} else {
		s.data = append(s.data, make([]byte, size-int64(len(s.data)))...)
	}
	return nil
}

func (s *heapStore) Size() int64  { return int64(len(s.data)) }
func (s *heapStore) Close() error { return nil }

// size is what Stat and ReadDir report for n.
func (n *memNode) size() int64 {
	if n.store == nil {
		return int64(len(n.synced))
	}
	return n.store.Size()
}

// open makes sure n has its store. The caller holds m.mu.
func (m *MemFS) open(n *memNode) error {
	if n.store != nil {
		return nil
	}
	newStore := m.newStore
	if newStore == nil {
		newStore = newHeapStore
	}
	s, err := newStore(n.synced)
	if err != nil {
		return err
	}
	n.store = s
	m.nodes = append(m.nodes, n)
	return nil
}

// Release frees the stores (a mapped MemFS holds a file descriptor per
// file). Mappings a queue still holds stay valid; nothing may be opened
// or read through m afterwards. Clones are released on their own.
func (m *MemFS) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.nodes {
		n.store.Close()
		n.store = nil
	}
	m.nodes = nil
}

// CrashClone returns the file system as a power cut now would leave it:
// each file with the bytes of its last fsync, under the names its
// directory had at its last fsync.
func (m *MemFS) CrashClone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.CrashCloneLocked()
}

// CrashCloneLocked is CrashClone for a caller holding the file system's
// lock: inside OnSync or Locked. It copies no file contents: the clone's
// files start from the synced bytes they share with m, and get their own
// stores when first opened.
func (m *MemFS) CrashCloneLocked() *MemFS {
	c := m.emptyClone()
	for name, n := range m.durable {
		if !c.dirs[filepath.Dir(name)] {
			continue
		}
		kept := &memNode{synced: n.synced}
		c.names[name], c.durable[name] = kept, kept
	}
	return c
}

// KillClone returns the file system as a SIGKILL of the process using it
// would leave it: the kernel keeps every byte written and every name
// made, fsynced or not; a power cut of the clone keeps them too.
func (m *MemFS) KillClone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.KillCloneLocked()
}

// KillCloneLocked is KillClone for a caller holding the file system's
// lock.
func (m *MemFS) KillCloneLocked() *MemFS {
	c := m.emptyClone()
	for name, n := range m.names {
		data := n.synced
		if n.store != nil {
			data = make([]byte, n.store.Size())
			if _, err := n.store.ReadAt(data, 0); err != nil && err != io.EOF {
				panic(fmt.Sprintf("vfs: read %s for a clone: %v", name, err))
			}
		}
		kept := &memNode{synced: data}
		c.names[name], c.durable[name] = kept, kept
	}
	return c
}

// emptyClone is a MemFS of m's kind with m's directories and no files.
// The caller holds m.mu.
func (m *MemFS) emptyClone() *MemFS {
	c := NewCrashableMem()
	c.newStore, c.wrap = m.newStore, m.wrap
	for d := range m.dirs {
		c.dirs[d] = true
	}
	return c
}

// Locked runs f with the file system's lock held, so that f is ordered
// against every fsync and directory fsync (and so against every OnSync
// call).
func (m *MemFS) Locked(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

// Files returns the names of the files there are now, sorted.
func (m *MemFS) Files() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.names))
	for name := range m.names {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (m *MemFS) OpenFile(name string, flag int, _ fs.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[filepath.Dir(name)] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if m.dirs[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	n, ok := m.names[name]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok:
		n = &memNode{}
		m.names[name] = n
	}
	if err := m.open(n); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if ok && flag&os.O_TRUNC != 0 {
		if err := n.store.Truncate(0); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	f := &memFile{fs: m, n: n, name: name, readOnly: flag&(os.O_WRONLY|os.O_RDWR) == 0}
	if m.wrap != nil {
		return m.wrap(f), nil
	}
	return f, nil
}

// Remove removes a file, durably at its directory's next fsync, or an
// empty directory, durably at once (see MemFS).
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirs[name] && name != "/" {
		for p := range m.names {
			if filepath.Dir(p) == name {
				return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
			}
		}
		for d := range m.dirs {
			if d != name && filepath.Dir(d) == name {
				return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
			}
		}
		delete(m.dirs, name)
		for p := range m.durable {
			if filepath.Dir(p) == name {
				delete(m.durable, p)
			}
		}
		return nil
	}
	if _, ok := m.names[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.names, name)
	return nil
}

// RemoveAll removes name, a file or a directory with everything under it.
// A file's removal is durable at its directory's next fsync, as Remove's;
// a directory's at once, with every name under it.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if name == "/" {
		return &fs.PathError{Op: "removeall", Path: name, Err: fs.ErrInvalid}
	}
	delete(m.names, name)
	if !m.dirs[name] {
		return nil
	}
	under := func(p string) bool { return p == name || strings.HasPrefix(p, name+"/") }
	for _, set := range []map[string]*memNode{m.names, m.durable} {
		for p := range set {
			if under(p) {
				delete(set, p)
			}
		}
	}
	for d := range m.dirs {
		if under(d) {
			delete(m.dirs, d)
		}
	}
	return nil
}

func (m *MemFS) Rename(oldName, newName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[oldName]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldName, Err: fs.ErrNotExist}
	}
	if !m.dirs[filepath.Dir(newName)] {
		return &fs.PathError{Op: "rename", Path: newName, Err: fs.ErrNotExist}
	}
	delete(m.names, oldName)
	m.names[newName] = n
	return nil
}

func (m *MemFS) ReadDir(dir string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var out []fs.DirEntry
	for name, n := range m.names {
		if filepath.Dir(name) == dir {
			out = append(out, memInfo{name: filepath.Base(name), size: n.size()})
		}
	}
	for d := range m.dirs {
		if d != dir && filepath.Dir(d) == dir {
			out = append(out, memInfo{name: filepath.Base(d), dir: true})
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (m *MemFS) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirs[name] {
		return memInfo{name: filepath.Base(name), dir: true}, nil
	}
	n, ok := m.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: filepath.Base(name), size: n.size()}, nil
}

// MkdirAll makes dir and its parents, as os.MkdirAll does; they survive
// any power cut from then on (see MemFS).
func (m *MemFS) MkdirAll(dir string, _ fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; !m.dirs[d]; d = filepath.Dir(d) {
		if _, ok := m.names[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
		}
	}
	for d := dir; !m.dirs[d]; d = filepath.Dir(d) {
		m.dirs[d] = true
	}
	return nil
}

// SyncDir makes the directory's current names durable.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	changed := false
	for name, n := range m.durable {
		if filepath.Dir(name) == dir && m.names[name] != n {
			delete(m.durable, name)
			changed = true
		}
	}
	for name, n := range m.names {
		if filepath.Dir(name) == dir && m.durable[name] != n {
			m.durable[name] = n
			changed = true
		}
	}
	if m.OnSync != nil {
		m.OnSync("dirsync", dir, changed)
	}
	return nil
}

// Lock takes name's lock, held until the returned Closer is closed. Like
// an flock, it lasts no longer than the file system value: a clone
// starts with no lock held.
func (m *MemFS) Lock(name string, _ fs.FileMode) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, name)
	}
	if !m.dirs[filepath.Dir(name)] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	m.locks[name] = true
	if _, ok := m.names[name]; !ok {
		m.names[name] = &memNode{}
	}
	return closerFunc(func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.locks, name)
		return nil
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// memFile is a handle on a MemFS file.
type memFile struct {
	fs       *MemFS
	n        *memNode
	name     string
	readOnly bool
	closed   bool
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	if f.fs.OnRead != nil {
		f.fs.OnRead(f.name, off)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, os.ErrClosed
	}
	return f.n.store.ReadAt(b, off)
}

func (f *memFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, os.ErrClosed
	}
	if f.readOnly {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrPermission}
	}
	return f.n.store.WriteAt(b, off)
}

// Sync makes what reads see now (on a mapped MemFS: what was stored
// through mappings, too, as fsync writes back a file's dirty mapped pages)
// what a power cut keeps.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	return f.syncLocked("fsync", f.n.store.Size())
}

// syncLocked makes [0, n) and the file's size what a power cut keeps: past
// n the durable bytes stay what the last sync left there (zeros where the
// file has grown since). op names the call in an error. The caller holds
// f.fs.mu.
func (f *memFile) syncLocked(op string, n int64) error {
	kept := make([]byte, f.n.store.Size())
	copy(kept, f.n.synced)
	if _, err := f.n.store.ReadAt(kept[:n], 0); err != nil && err != io.EOF {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	changed := !bytes.Equal(kept, f.n.synced)
	f.n.synced = kept
	if f.fs.OnSync != nil {
		f.fs.OnSync("fsync", f.name, changed)
	}
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	if f.readOnly {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: fs.ErrPermission}
	}
	return f.n.store.Truncate(size)
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return memInfo{name: filepath.Base(f.name), size: f.n.size()}, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.closed = true
	return nil
}

// memInfo is both the fs.FileInfo and the fs.DirEntry of a MemFS file or
// directory.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return i.Type() | 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Type() fs.FileMode {
	if i.dir {
		return fs.ModeDir
	}
	return 0
}
func (i memInfo) Info() (fs.FileInfo, error) { return i, nil }
