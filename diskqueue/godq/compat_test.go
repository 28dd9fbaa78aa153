package godq_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/diskqueue/godq"
)

// These tests hold NewCompat to go-diskqueue's documented behaviour, through
// its Interface only.

func compat(t *testing.T, dir string, maxBytesPerFile int64) godiskqueue.Interface {
	t.Helper()
	return godq.NewCompat("q", dir, maxBytesPerFile, 0, 1<<10, 2500, time.Second, func(lvl godiskqueue.LogLevel, f string, args ...interface{}) {
		t.Logf(lvl.String()+": "+f, args...)
	})
}

func TestCompatRoundTripAndDepth(t *testing.T) {
	dq := compat(t, t.TempDir(), 100)
	defer dq.Close()
	for i := 0; i < 30; i++ {
		if err := dq.Put([]byte(fmt.Sprintf("m%02d", i))); err != nil {
			t.Fatal(err)
		}
		if got := dq.Depth(); got != int64(i+1) {
			t.Fatalf("Depth after %d puts: %d", i+1, got)
		}
	}
	for i := 0; i < 30; i++ {
		got := <-dq.ReadChan()
		if want := fmt.Sprintf("m%02d", i); string(got) != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		// Taking a message from ReadChan consumes it at once.
		if d := dq.Depth(); d != int64(29-i) {
			t.Fatalf("Depth after %d reads: %d", i+1, d)
		}
	}
}

func TestCompatCloseKeepsEverythingPut(t *testing.T) {
	dir := t.TempDir()
	dq := compat(t, dir, 1<<10)
	var puts atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if dq.Put([]byte("torture")) == nil {
					puts.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dq.Put([]byte("late")); err == nil {
		t.Fatal("Put after Close succeeded")
	}
	dq = compat(t, dir, 1<<10)
	defer dq.Close()
	if got := dq.Depth(); got != puts.Load() {
		t.Fatalf("Depth after reopen %d, want %d", got, puts.Load())
	}
	for i := int64(0); i < puts.Load(); i++ {
		if got := <-dq.ReadChan(); !bytes.Equal(got, []byte("torture")) {
			t.Fatalf("got %q", got)
		}
	}
}

func TestCompatEmptyAndDelete(t *testing.T) {
	dir := t.TempDir()
	dq := compat(t, dir, 100)
	for i := 0; i < 20; i++ {
		dq.Put([]byte("x"))
	}
	<-dq.ReadChan()
	if err := dq.Empty(); err != nil {
		t.Fatal(err)
	}
	if d := dq.Depth(); d != 0 {
		t.Fatalf("Depth after Empty: %d", d)
	}
	dq.Put([]byte("after"))
	if got := <-dq.ReadChan(); string(got) != "after" {
		t.Fatalf("after Empty got %q: a message read before Empty leaked out", got)
	}
	if err := dq.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "q.spillq")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Delete left the queue's files: %v", err)
	}
}

func TestCompatSizeLimits(t *testing.T) {
	dq := godq.NewCompat("q", t.TempDir(), 1<<20, 4, 8, 1, time.Second, nil)
	defer dq.Close()
	if err := dq.Put([]byte("abc")); !errors.Is(err, diskqueue.ErrRecordTooSmall) {
		t.Fatalf("short message: %v", err)
	}
	if err := dq.Put([]byte("123456789")); !errors.Is(err, diskqueue.ErrRecordTooLarge) {
		t.Fatalf("long message: %v", err)
	}
}

// TestCompatOpenFailure: go-diskqueue's New cannot return an error; when the
// directory is held by another queue, every method reports it instead.
func TestCompatOpenFailure(t *testing.T) {
	dir := t.TempDir()
	first := compat(t, dir, 1<<20)
	defer first.Close()
	second := compat(t, dir, 1<<20)
	if err := second.Put([]byte("x")); !errors.Is(err, diskqueue.ErrLocked) {
		t.Fatalf("Put on a queue that could not open: %v", err)
	}
	if err := second.Close(); !errors.Is(err, diskqueue.ErrLocked) {
		t.Fatalf("Close: %v", err)
	}
}

// TestCompatCloseKeepsReadAhead: records read ahead of the consumer and
// not taken from ReadChan are not consumed; after Close they are still in
// the queue, in order.
func TestCompatCloseKeepsReadAhead(t *testing.T) {
	dir := t.TempDir()
	dq := compat(t, dir, 1<<20)
	for i := 0; i < 200; i++ {
		if err := dq.Put([]byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		<-dq.ReadChan()
	}
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	dq = compat(t, dir, 1<<20)
	defer dq.Close()
	if d := dq.Depth(); d != 195 {
		t.Fatalf("Depth after reopen %d, want 195", d)
	}
	for i := 5; i < 200; i++ {
		if got := <-dq.ReadChan(); string(got) != fmt.Sprint(i) {
			t.Fatalf("got %q, want %d", got, i)
		}
	}
}
