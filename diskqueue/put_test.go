package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/vfs"
)

func TestRecordLimits(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{MinRecordBytes: 2, MaxRecordBytes: 10})
	defer q.Close()
	ctx := context.Background()
	if err := q.Put(ctx, make([]byte, 11)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("got %v, want ErrRecordTooLarge", err)
	}
	if err := q.Put(ctx, []byte("x")); !errors.Is(err, ErrRecordTooSmall) {
		t.Fatalf("got %v, want ErrRecordTooSmall", err)
	}
	if err := q.Put(ctx, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if q.Depth() != 1 {
		t.Fatalf("rejected records counted: Depth %d", q.Depth())
	}
}

func TestEmptyBodies(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{})
	defer q.Close()
	for _, b := range [][]byte{nil, {}} {
		if err := q.Put(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, q)
	if len(got) != 2 || len(got[0]) != 0 || len(got[1]) != 0 {
		t.Fatalf("got %q", got)
	}
}

func TestCompression(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{Compress: true})
	ctx := context.Background()
	compressible := bytes.Repeat([]byte("spillq "), 1000)
	random := make([]byte, 1000)
	for i := range random {
		random[i] = byte(rand.IntN(256))
	}
	q.Put(ctx, compressible)
	q.Put(ctx, random)
	q.Close()
	// Reopen without compression: old compressed records read back, new
	// ones are stored plain.
	q = mustOpen(t, dir, Options{})
	defer q.Close()
	q.Put(ctx, compressible)
	q.Sync(ctx)
	got := readAll(t, q)
	if len(got) != 3 || !bytes.Equal(got[0], compressible) || !bytes.Equal(got[1], random) || !bytes.Equal(got[2], compressible) {
		t.Fatal("bodies differ after a mixed compressed/plain log")
	}
	if st := q.Stats(); st.DiskBytes > 3*16+2*1000+7000+500 {
		t.Fatalf("compressible record was not compressed: %d bytes on disk", st.DiskBytes)
	}
}

// TestPutCtxAndDurability: under SyncEvery 1, a Put whose ctx has ended
// stores nothing, and one whose ctx ends while it waits for its fsync
// says the record is stored (ErrNotDurable), which a reader then gets:
// before, both returned the context's error alone, and a caller could
// not tell a record that will be delivered from one that will not.
func TestPutCtxAndDurability(t *testing.T) {
	dir := t.TempDir()
	g := gatedSyncFS{fileSystem: vfs.OS, hold: new(atomic.Bool), release: make(chan struct{})}
	q := mustOpen(t, dir, Options{SyncEvery: 1, FS: g})
	defer q.Close()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Put(ended, []byte("never")); !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotDurable) {
		t.Fatalf("Put with an ended ctx: %v, want context.Canceled alone", err)
	}
	if n, err := q.PutBatch(ended, [][]byte{[]byte("never")}); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("PutBatch with an ended ctx: %d, %v", n, err)
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after Puts refused", d)
	}
	g.hold.Store(true)
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	err := q.Put(short, []byte("stored"))
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put whose fsync outlasted ctx: %v, want ErrNotDurable and DeadlineExceeded", err)
	}
	g.hold.Store(false)
	close(g.release)
	rec, err := q.Read(context.Background())
	if err != nil || string(rec.Body) != "stored" {
		t.Fatalf("Read: %q, %v", rec.Body, err)
	}
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// gatedSyncFS holds every fsync of a file while hold is set, until
// release is closed.
type gatedSyncFS struct {
	fileSystem
	hold    *atomic.Bool
	release chan struct{}
}

func (g gatedSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := g.fileSystem.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return gatedFile{f, g}, nil
}

type gatedFile struct {
	file
	g gatedSyncFS
}

func (f gatedFile) Sync() error {
	if f.g.hold.Load() {
		<-f.g.release
	}
	return f.file.Sync()
}
