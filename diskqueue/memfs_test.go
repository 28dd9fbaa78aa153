package diskqueue

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// memFS is an in-memory file system that keeps, for a simulated power cut,
// only what was made durable: a file's contents as of its last fsync, and
// a directory's names as of its last directory fsync. crashClone returns
// that durable state as a new file system, the way a machine that lost
// power would find its disk.
//
// newMemFS's files live in Go memory and cannot be mapped, so a queue on
// it takes the write(2) path. On Linux newMappedMemFS (memfs_linux_test.go)
// keeps each file in a memfd instead, and its handles implement mapper and
// puncher, so a queue on it takes the mapped path as on a real disk: the
// fsync ordering (sealing, directory syncs, group commit, the cursor) is
// the same code on both paths, the appends and acknowledgements are not.
type memFS struct {
	mu      sync.Mutex
	names   map[string]*memNode // the namespace now
	durable map[string]*memNode // the namespace as of each directory's last fsync
	dirs    map[string]bool
	locks   map[string]bool
	nodes   []*memNode // every node given a store, for release

	// newStore makes the storage of a file holding init (Go memory by
	// default); wrap makes the handle OpenFile returns (the memFile itself
	// by default). A mapped memFS sets both.
	newStore func(init []byte) (memStore, error)
	wrap     func(*memFile) file

	// onSync, if set, is called with mu held after every file fsync and
	// directory fsync: op is "fsync" or "dirsync", name the file or
	// directory, changed whether the durable state is different now. A
	// test cuts the power there (crashCloneLocked).
	onSync func(op, name string, changed bool)
	// onRead, if set before the file system is used, is called before
	// every ReadAt, without mu held, so a test can hold a reader there.
	onRead func(name string, off int64)
}

// memFSKind is a flavour of memFS to run a test on (memFSKinds): new
// makes one, and path is the WritePath a queue on it reports.
type memFSKind struct {
	name string
	new  func(testing.TB) *memFS
	path string
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

func newMemFS() *memFS {
	return &memFS{names: map[string]*memNode{}, durable: map[string]*memNode{}, dirs: map[string]bool{}, locks: map[string]bool{}}
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
func (m *memFS) open(n *memNode) error {
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

// release frees the stores (a mapped memFS holds a file descriptor per
// file). Mappings a queue still holds stay valid; nothing may be opened
// or read through m afterwards.
func (m *memFS) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.nodes {
		n.store.Close()
		n.store = nil
	}
	m.nodes = nil
}

// crashClone returns the file system as a power cut would leave it.
func (m *memFS) crashClone() *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashCloneLocked()
}

// crashCloneLocked is crashClone with m.mu held. It copies no file
// contents: the clone's files start from the synced bytes they share with
// m, and get their own stores when first opened.
func (m *memFS) crashCloneLocked() *memFS {
	c := newMemFS()
	c.newStore, c.wrap = m.newStore, m.wrap
	for d := range m.dirs {
		c.dirs[d] = true
	}
	for name, n := range m.durable {
		kept := &memNode{synced: n.synced}
		c.names[name], c.durable[name] = kept, kept
	}
	return c
}

// killCloneLocked returns the file system as a SIGKILL of the process
// using it would leave it: the kernel keeps every byte written and every
// name made, fsynced or not. The caller holds m.mu.
func (m *memFS) killCloneLocked() *memFS {
	c := newMemFS()
	c.newStore, c.wrap = m.newStore, m.wrap
	for d := range m.dirs {
		c.dirs[d] = true
	}
	for name, n := range m.names {
		data := n.synced
		if n.store != nil {
			data = make([]byte, n.store.Size())
			if _, err := n.store.ReadAt(data, 0); err != nil && err != io.EOF {
				panic(fmt.Sprintf("memFS: read %s for a clone: %v", name, err))
			}
		}
		kept := &memNode{synced: data}
		c.names[name], c.durable[name] = kept, kept
	}
	return c
}

// locked runs f with m.mu held, so that f is ordered against every fsync
// and directory fsync (and so against every onSync call).
func (m *memFS) locked(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

func (m *memFS) OpenFile(name string, flag int, _ fs.FileMode) (file, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[filepath.Dir(name)] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	n, ok := m.names[name]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
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

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.names[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.names, name)
	return nil
}

func (m *memFS) Rename(oldName, newName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[oldName]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldName, Err: fs.ErrNotExist}
	}
	delete(m.names, oldName)
	m.names[newName] = n
	return nil
}

func (m *memFS) ReadDir(dir string) ([]fs.DirEntry, error) {
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

func (m *memFS) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: filepath.Base(name), size: n.size()}, nil
}

func (m *memFS) MkdirAll(dir string, _ fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Directories themselves survive: the test makes one. Their parents
	// too, as os.MkdirAll makes them.
	for d := dir; !m.dirs[d]; d = filepath.Dir(d) {
		m.dirs[d] = true
	}
	return nil
}

// SyncDir makes the directory's current names durable.
func (m *memFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	if m.onSync != nil {
		m.onSync("dirsync", dir, changed)
	}
	return nil
}

func (m *memFS) Lock(name string, _ fs.FileMode) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, name)
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

type memFile struct {
	fs       *memFS
	n        *memNode
	name     string
	readOnly bool
	closed   bool
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	if f.fs.onRead != nil {
		f.fs.onRead(f.name, off)
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

// Sync makes what reads see now (on a mapped memFS: what was stored
// through mappings, too, as fsync writes back a file's dirty mapped pages)
// what a power cut keeps.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	now := make([]byte, f.n.store.Size())
	if _, err := f.n.store.ReadAt(now, 0); err != nil && err != io.EOF {
		return &fs.PathError{Op: "fsync", Path: f.name, Err: err}
	}
	changed := !bytes.Equal(now, f.n.synced)
	f.n.synced = now
	if f.fs.onSync != nil {
		f.fs.onSync("fsync", f.name, changed)
	}
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
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

// memInfo is both the fs.FileInfo and the fs.DirEntry of a memFS file or
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

// TestPowerCutAtEveryStep runs a workload (puts across many small
// segments, reads and acknowledgements, so rotation, sealing and deletion
// all happen) and after every step cuts the power: a queue opened on what
// was durable at that moment must hold every record the sync policy
// promised. With SyncEvery 1 that is every Put that returned; with the
// default policy, every record below the synced mark at the cut. Nothing
// served may be a body nobody put, and seqs stay in order. It runs on the
// write(2) path and (on Linux) the mapped one.
func TestPowerCutAtEveryStep(t *testing.T) {
	for _, kind := range memFSKinds() {
		for _, c := range []struct {
			name string
			opts Options
		}{
			{"sync1", Options{SyncEvery: 1, MaxSegmentBytes: 512}},
			{"default", Options{MaxSegmentBytes: 512, SyncEvery: 7, SyncInterval: time.Millisecond}},
		} {
			t.Run(kind.name+"/"+c.name, func(t *testing.T) {
				steps := 300
				if testing.Short() {
					steps = 120
				}
				mfs := kind.new(t)
				dir := "/q"
				opts := c.opts
				opts.fsForTesting = mfs
				q, err := Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				if got := q.Stats().WritePath; got != kind.path {
					t.Fatalf("a queue on this memFS writes with %q, want %q", got, kind.path)
				}
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
				var put [][]byte // put[seq] is the body Put returned for
				done, cancel := context.WithCancel(ctx)
				cancel()
				for step := 0; step < steps; step++ {
					switch rng.IntN(4) {
					case 0, 1:
						body := []byte(fmt.Sprintf("step-%d-%s", step, strings.Repeat("x", rng.IntN(40))))
						if err := q.Put(ctx, body); err != nil {
							t.Fatal(err)
						}
						put = append(put, body)
					case 2:
						if rec, err := q.Read(done); err == nil {
							q.Ack(rec.Seq)
						}
					case 3:
						if rng.IntN(4) == 0 {
							q.Sync(ctx)
						}
					}
					promised := uint64(len(put))
					if opts.SyncEvery != 1 {
						promised = q.syncedSeq.Load()
					}
					floor := q.c.ackFloor.Load()
					checkAfterPowerCut(t, step, mfs.crashClone(), dir, kind, c.opts, put, min(floor, promised), promised)
				}
			})
		}
	}
}

// checkAfterPowerCut opens the durable state and checks that every record
// in [from, promised) is there with its body, and that nothing else served
// is a body nobody put.
func checkAfterPowerCut(t *testing.T, step int, clone *memFS, dir string, kind memFSKind, opts Options, put [][]byte, from, promised uint64) {
	t.Helper()
	defer clone.release()
	opts.fsForTesting = clone
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("step %d: open after a power cut: %v", step, err)
	}
	defer q.Close()
	st := q.Stats()
	if st.WritePath != kind.path {
		t.Fatalf("step %d: after a power cut the queue writes with %q, want %q", step, st.WritePath, kind.path)
	}
	if st.WriteSeq < promised {
		t.Fatalf("step %d: after a power cut the log ends at %d; %d records were promised durable", step, st.WriteSeq, promised)
	}
	for seq := from; seq < promised; seq++ {
		rec, err := q.ReadAt(seq)
		if err != nil {
			if seq < st.FirstSeq {
				continue // acknowledged and deleted before the cut
			}
			t.Fatalf("step %d: durable record %d: %v (stats %+v)", step, seq, err, st)
		}
		if string(rec.Body) != string(put[seq]) {
			t.Fatalf("step %d: record %d is %q, put %q", step, seq, rec.Body, put[seq])
		}
	}
	for seq := st.FirstSeq; seq < st.WriteSeq; seq++ {
		rec, err := q.ReadAt(seq)
		if err != nil {
			continue // lost in the cut (not promised) or acknowledged and deleted
		}
		if seq >= uint64(len(put)) || string(rec.Body) != string(put[seq]) {
			t.Fatalf("step %d: after a power cut seq %d holds %q, which nobody put there", step, seq, rec.Body)
		}
	}
}
