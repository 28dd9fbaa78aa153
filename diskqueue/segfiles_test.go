package diskqueue

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// A generation's references: the segment's own and one per reader. The
// last release closes the descriptors; once closed (the segment deleted)
// nobody takes one, and from zero nobody does either, so a generation
// the cache gave back is not revived.
func TestSegFilesRefs(t *testing.T) {
	open := func() file {
		f, err := vfs.OS.OpenFile(filepath.Join(t.TempDir(), "log"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := newSegFiles(open(), nil, 0, false)
	if !f.tryAcquire() || f.refs.Load() != 2 {
		t.Fatalf("tryAcquire: refs %d", f.refs.Load())
	}
	f.release()
	f.release() // the segment's own: the last
	if f.refs.Load() != 0 || !f.fdsClosed {
		t.Fatalf("after the last release: refs %d, closed %v", f.refs.Load(), f.fdsClosed)
	}
	if f.tryAcquire() {
		t.Fatal("took a reference from zero")
	}

	g := newSegFiles(open(), nil, 0, false)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if g.tryAcquire() {
					g.release()
				}
			}
		})
	}
	wg.Wait()
	if g.refs.Load() != 1 || g.fdsClosed {
		t.Fatalf("after balanced acquires: refs %d, closed %v", g.refs.Load(), g.fdsClosed)
	}
	seg := &segment{}
	seg.files.Store(g)
	seg.closeFiles() // deleted: descriptors closed at once, the segment's hold given back
	if !g.closed.Load() || !g.fdsClosed || g.refs.Load() != 0 || g.tryAcquire() {
		t.Fatalf("after closeFiles: closed %v, fds closed %v, refs %d", g.closed.Load(), g.fdsClosed, g.refs.Load())
	}
	seg.closeFiles() // twice is harmless
}
