package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// opKind names a kind of file-system call errorFS can fail.
type opKind = vfs.Op

const (
	opOpen     = vfs.OpOpen
	opWrite    = vfs.OpWrite
	opSync     = vfs.OpSync
	opTruncate = vfs.OpTruncate
	opRename   = vfs.OpRename
	opRemove   = vfs.OpRemove
	opSyncDir  = vfs.OpSyncDir
	opRead     = vfs.OpRead
)

// errorFS wraps the real file system and fails calls of one kind (see
// vfs.ErrorFS).
type errorFS = vfs.ErrorFS

func faultBody(i int) []byte { return []byte(fmt.Sprintf("fault-%05d", i)) }

// readAll drains q and returns the bodies in order.
func readAll(t *testing.T, q *Queue) [][]byte {
	t.Helper()
	if err := q.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var out [][]byte
	for {
		rec, err := q.Read(done)
		if errors.Is(err, context.Canceled) {
			return out
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		q.Ack(rec.Seq)
		out = append(out, rec.Body)
	}
}

// TestFaultAtEveryCallSite fails the Nth call of each kind in turn while a
// workload puts (with rotation), reads, acknowledges and closes. Whatever
// fails: no panic, the error reaches a caller, and every record whose Put
// and a later Sync both returned nil is there after a clean reopen.
func TestFaultAtEveryCallSite(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	kinds := []opKind{opOpen, opWrite, opSync, opTruncate, opRename, opRemove, opSyncDir, opRead}
	errs := []error{syscall.EIO, syscall.ENOSPC}
	fired := map[opKind]int{}
	for _, kind := range kinds {
		for _, injected := range errs {
			for nth := 1; nth <= 12; nth += faultStride() {
				name := fmt.Sprintf("%s/%v/%d", kind, injected, nth)
				efs := &errorFS{ShortWrite: nth%2 == 0}
				dir := t.TempDir()
				durable := runFaultWorkload(t, dir, efs, kind, nth, injected)
				fired[kind] += efs.Fired()
				q, err := Open(dir, Options{MaxSegmentBytes: 300})
				if err != nil {
					t.Fatalf("%s: clean reopen: %v", name, err)
				}
				got := map[string]bool{}
				for _, b := range readAll(t, q) {
					got[string(b)] = true
				}
				q.Close()
				for _, b := range durable {
					if !got[string(b)] {
						t.Fatalf("%s: durable record %q lost", name, b)
					}
				}
			}
		}
	}
	t.Logf("faults fired: %v", fired)
	// Renames and truncations happen only in repairs, which this workload
	// does not need; every other kind must really have been hit.
	for _, kind := range []opKind{opOpen, opWrite, opSync, opRemove, opSyncDir, opRead} {
		if fired[kind] == 0 {
			t.Errorf("no %s fault fired: the campaign does not reach that call site", kind)
		}
	}
}

// faultStride is how far apart the Nth calls TestFaultAtEveryCallSite
// fails are: every one, or under -short every third (1, 4, 7, 10), the
// first call of each kind always among them.
func faultStride() int {
	if testing.Short() {
		return 3
	}
	return 1
}

// runFaultWorkload returns the bodies acknowledged as durable and not
// consumed.
func runFaultWorkload(t *testing.T, dir string, efs *errorFS, kind opKind, nth int, injected error) [][]byte {
	t.Helper()
	efs.Arm(kind, nth, injected, false)
	q, err := Open(dir, Options{FS: efs, MaxSegmentBytes: 300, SyncEvery: 4})
	if err != nil {
		// The fault hit Open: it must say so and hold nothing.
		if !errors.Is(err, injected) {
			t.Fatalf("Open failed with %v, not the injected %v", err, injected)
		}
		return nil
	}
	ctx := context.Background()
	var pending, durable [][]byte
	consumed := map[string]bool{}
	done, cancel := context.WithCancel(ctx)
	cancel()
	for i := 0; i < 40; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			if !errors.Is(err, injected) {
				t.Fatalf("Put failed with %v, not the injected %v", err, injected)
			}
			continue
		}
		pending = append(pending, faultBody(i))
		if i%5 == 4 {
			if err := q.Sync(ctx); err == nil {
				durable = append(durable, pending...)
				pending = nil
			}
		}
		if i%7 == 6 {
			for j := 0; j < 3; j++ {
				rec, err := q.Read(done)
				if err != nil {
					break
				}
				if q.Ack(rec.Seq) == nil {
					consumed[string(rec.Body)] = true
				}
			}
		}
	}
	q.Close()
	var out [][]byte
	for _, b := range durable {
		if !consumed[string(b)] {
			out = append(out, b)
		}
	}
	return out
}
