package diskqueue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{})
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: got %v, want ErrLocked", err)
	}
	q.Close()
	q = mustOpen(t, dir, Options{})
	q.Close()
}

func TestOpenOnAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, []byte("x"), 0o644)
	if _, err := Open(f, Options{}); err == nil {
		t.Fatal("Open on a regular file succeeded")
	}
}

func TestUseAfterClose(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{})
	var wg sync.WaitGroup
	readErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := q.Read(context.Background())
		readErr <- err
	}()
	// Close twice, concurrently: one wins, the other says ErrClosed.
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- q.Close() }()
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, ErrClosed) || errors.Is(e2, ErrClosed)) {
		t.Fatalf("concurrent Close: got %v and %v, want nil and ErrClosed", e1, e2)
	}
	wg.Wait()
	if err := <-readErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Read: got %v, want ErrClosed", err)
	}
	ctx := context.Background()
	if err := q.Put(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put: got %v", err)
	}
	if _, err := q.Read(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read: got %v", err)
	}
	if err := q.Sync(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync: got %v", err)
	}
	if err := q.Empty(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Empty: got %v", err)
	}
	if _, err := q.ReadAt(0); err == nil {
		t.Fatal("ReadAt after Close succeeded")
	}
}
