package diskqueue

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// mapFailFS is the real file system whose files fail Map with ENOMEM
// (not a "cannot map here", which falls back to write(2)) while failing
// is set, for the segment files created with O_TRUNC.
type mapFailFS struct {
	fileSystem
	failing atomic.Bool
}

type mapFailFile struct {
	file
	fs *mapFailFS
}

func (f mapFailFile) Map(n int) ([]byte, error) {
	if f.fs.failing.Load() {
		return nil, &fs.PathError{Op: "mmap", Path: "segment", Err: syscall.ENOMEM}
	}
	return f.file.(mapper).Map(n)
}
func (f mapFailFile) Allocate(off, n int64) error { return f.file.(mapper).Allocate(off, n) }
func (f mapFailFile) SyncMapped(m []byte, n int64) error {
	return f.file.(mapper).SyncMapped(m, n)
}

func (m *mapFailFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := m.fileSystem.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if _, ok := f.(mapper); ok && strings.HasSuffix(filepath.Base(name), logSuffix) {
		return mapFailFile{file: f, fs: m}, nil
	}
	return f, nil
}

// A segment's log that cannot be mapped for a reason other than "not
// here" (ENOMEM: no address space) makes the rotation fail with that
// error, on the producer's goroutine or the writer's (the spare), and
// the log goes on once mapping works again. It used to dereference the
// nil segment of an empty tail to name it in the error.
func TestMapFailureAtRotationIsAnError(t *testing.T) {
	if _, ok := mustOpenFile(t).(mapper); !ok {
		t.Skip("no mapped append path here")
	}
	mfs := &mapFailFS{fileSystem: vfs.OS}
	l, err := OpenLog(t.TempDir(), Options{MaxSegmentBytes: 4096, FS: mfs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	body := make([]byte, 500)
	mfs.failing.Store(true)
	var putErr error
	for range 20 {
		if putErr = l.Put(ctx, body); putErr != nil {
			break
		}
	}
	if !errors.Is(putErr, syscall.ENOMEM) {
		t.Fatalf("Put at rotation with mmap failing: %v, want ENOMEM", putErr)
	}
	// The writer's round tries the spare as well; it must not take the
	// process down either.
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	mfs.failing.Store(false)
	for range 20 {
		if err := l.Put(ctx, body); err != nil {
			t.Fatalf("Put once mapping works again: %v", err)
		}
	}
	if st := l.Stats(); st.WritePath != "mmap" || st.Segments < 2 {
		t.Fatalf("WritePath %q with %d segments; want mmap and a rotation", st.WritePath, st.Segments)
	}
}

func mustOpenFile(t *testing.T) file {
	t.Helper()
	f, err := vfs.OS.OpenFile(filepath.Join(t.TempDir(), "probe"), syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Preallocation grows by doubling up to the chunk, then a chunk at a
// time, so a small queue stays small and a busy one calls fallocate once
// per chunk; asking within what is allocated costs nothing.
func TestRegionGrowsByDoublingToAChunk(t *testing.T) {
	f := mustOpenFile(t)
	if _, ok := f.(mapper); !ok {
		t.Skip("no mapped append path here")
	}
	r, ok, err := mapRegion(f, 0, 1<<20, 16<<10)
	if err != nil || !ok {
		t.Fatalf("mapRegion: %v %v", ok, err)
	}
	defer r.release()
	var got []int64
	for _, end := range []int64{1, 100, 4097, 8193, 16385, 32769, 40000, 1 << 20} {
		if err := r.ensure(end); err != nil {
			t.Fatal(err)
		}
		got = append(got, r.alloc)
	}
	want := []int64{4096, 4096, 8192, 16384, 32768, 49152, 49152, 1 << 20}
	if !slices.Equal(got, want) {
		t.Fatalf("allocations %v, want %v", got, want)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 1<<20 {
		t.Fatalf("file size %v (%v), want the allocation", st.Size(), err)
	}
	if err := r.ensure(1<<20 + 1); err == nil {
		t.Fatal("ensure past the mapping succeeded")
	}
}

// appendFiles maps all three files or none: one file that cannot be
// mapped leaves the others unmapped too, so an append never mixes a copy
// into a mapping with a write(2).
func TestAppendFilesMapAllOrNone(t *testing.T) {
	probe := mustOpenFile(t)
	if _, ok := probe.(mapper); !ok {
		t.Skip("no mapped append path here")
	}
	dir := t.TempDir()
	open := func(name string) file {
		f, err := vfs.OS.OpenFile(filepath.Join(dir, name), syscall.O_RDWR|syscall.O_CREAT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	limits := [3]int64{1 << 20, 1 << 16, 1 << 12}
	var a appendFiles
	a.log.f, a.index.f, a.timeIdx.f = open("a.log"), open("a.index"), plainFile{open("a.timeindex")}
	if err := a.mapAll([3]int64{}, limits); err != nil {
		t.Fatal(err)
	}
	if a.mapped || a.log.m != nil || a.index.m != nil || a.timeIdx.m != nil {
		t.Fatalf("one file unmappable, yet mapped %v (log %d, index %d bytes)", a.mapped, len(a.log.m), len(a.index.m))
	}
	a.close()

	var b appendFiles
	b.log.f, b.index.f, b.timeIdx.f = open("b.log"), open("b.index"), open("b.timeindex")
	if err := b.mapAll([3]int64{}, limits); err != nil {
		t.Fatal(err)
	}
	if !b.mapped || b.log.m == nil || b.index.m == nil || b.timeIdx.m == nil {
		t.Fatal("three mappable files not mapped")
	}
	for _, r := range b.regions() {
		if err := r.ensure(100); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.truncate(30, 20, 10); err != nil {
		t.Fatal(err)
	}
	for i, r := range b.regions() {
		if st, _ := r.f.Stat(); st.Size() != []int64{30, 20, 10}[i] {
			t.Fatalf("file %d is %d bytes after truncate", i, st.Size())
		}
	}
	b.close()
	if b.log.m != nil {
		t.Fatal("close left a mapping")
	}
}

// plainFile hides a file's mapper methods.
type plainFile struct{ file }

// TestWritePathFallback: where segments cannot be mapped the producer's own
// write(2) keeps the same guarantee, and Stats says which path is in use.
func TestWritePathFallback(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{writePathForTesting: true, MaxSegmentBytes: 4 << 10})
	ctx := context.Background()
	if got := q.Stats().WritePath; got != "write" {
		t.Fatalf("WritePath %q, want write", got)
	}
	for i := 0; i < 300; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	// What Put returned for is in the kernel: another reader of the files
	// (a read-only view) sees every record without a Sync or Close.
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st := ro.Stats(); st.WriteSeq != 300 {
		t.Fatalf("read-only view sees WriteSeq %d, want 300", st.WriteSeq)
	}
	ro.Close()
	got := readAll(t, q)
	if len(got) != 300 {
		t.Fatalf("read %d of 300", len(got))
	}
	q.Close()
	q = mustOpen(t, dir, Options{})
	defer q.Close()
	if st := q.Stats(); st.Depth != 0 || st.WritePath != "mmap" {
		t.Fatalf("reopened on the mapped path: %+v", st)
	}
}
