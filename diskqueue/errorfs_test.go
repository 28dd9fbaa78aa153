package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
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

// TestENOSPCRefusesAndRecovers: on the write(2) path, a write failing with
// ENOSPC makes that Put fail with ErrDiskFull wrapping ENOSPC and leaves
// nothing of it behind; nothing Put accepted is dropped; once space
// returns, Put works again.
func TestENOSPCRefusesAndRecovers(t *testing.T) {
	efs := &errorFS{ShortWrite: true}
	dir := t.TempDir()
	q, err := Open(dir, Options{FS: efs, SyncEvery: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	var accepted [][]byte
	for i := 0; i < 10; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, faultBody(i))
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	efs.Arm(opWrite, 1, syscall.ENOSPC, true)
	var fullErr error
	for i := 10; fullErr == nil; i++ {
		err := q.Put(ctx, faultBody(i))
		if err == nil {
			accepted = append(accepted, faultBody(i))
			continue
		}
		fullErr = err
	}
	if !errors.Is(fullErr, ErrDiskFull) || !errors.Is(fullErr, syscall.ENOSPC) {
		t.Fatalf("Put on a full disk: got %v, want ErrDiskFull wrapping ENOSPC", fullErr)
	}
	if err := q.Put(ctx, []byte("still full")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second Put on a full disk: got %v", err)
	}
	efs.Heal()
	if err := q.Sync(ctx); err != nil {
		t.Fatalf("Sync after space returned: %v", err)
	}
	if err := q.Put(ctx, []byte("after")); err != nil {
		t.Fatalf("Put after space returned: %v", err)
	}
	accepted = append(accepted, []byte("after"))
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, q)
	if len(got) != len(accepted) {
		t.Fatalf("read %d records, accepted %d", len(got), len(accepted))
	}
	for i := range got {
		if !bytes.Equal(got[i], accepted[i]) {
			t.Fatalf("record %d: got %q, want %q", i, got[i], accepted[i])
		}
	}
}

// TestFsyncFailureIsSticky: after a failed fsync the queue never claims
// durability again; every later Put and Close return the error; records
// acknowledged before it survive a reopen.
func TestFsyncFailureIsSticky(t *testing.T) {
	efs := &errorFS{}
	dir := t.TempDir()
	q, err := Open(dir, Options{FS: efs, SyncEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := q.Stats(); st.WriteErr != nil || st.Closed {
		t.Fatalf("Stats before the fault: WriteErr %v, Closed %v", st.WriteErr, st.Closed)
	}
	efs.Arm(opSync, 1, syscall.EIO, false)
	err = q.Put(ctx, faultBody(5))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Put with failing fsync: got %v, want EIO", err)
	}
	if st := q.Stats(); !errors.Is(st.WriteErr, syscall.EIO) {
		t.Fatalf("Stats().WriteErr after a failed fsync: %v, want the sticky EIO", st.WriteErr)
	}
	// The fault fired once; a retried fsync would now succeed, and must not
	// be trusted.
	if err := q.Put(ctx, faultBody(6)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Put after failed fsync: got %v, want the sticky EIO", err)
	}
	if err := q.Sync(ctx); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync after failed fsync: got %v, want the sticky EIO", err)
	}
	if err := q.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close: got %v, want the sticky EIO", err)
	}
	if !q.Stats().Closed {
		t.Fatal("Stats().Closed false after Close")
	}
	q, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := readAll(t, q)
	if len(got) < 5 {
		t.Fatalf("after reopen: %d records, want at least the 5 acknowledged", len(got))
	}
	for i := 0; i < 5; i++ {
		if !bytes.Equal(got[i], faultBody(i)) {
			t.Fatalf("record %d: %q", i, got[i])
		}
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

// TestTransientReadErrorIsNotCorruption: an I/O error while reading is
// returned to the caller and the same record is read by the next call; it
// is never counted as corruption or quarantined (go-diskqueue renames
// healthy files to .bad on such errors).
func TestTransientReadErrorIsNotCorruption(t *testing.T) {
	efs := &errorFS{}
	dir := t.TempDir()
	q, err := Open(dir, Options{FS: efs})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	q.Put(ctx, faultBody(0))
	q.Sync(ctx)
	efs.Arm(opRead, 1, syscall.EIO, false)
	if _, err := q.Read(ctx); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Read during an I/O error: got %v, want EIO", err)
	}
	rec, err := q.Read(ctx)
	if err != nil || !bytes.Equal(rec.Body, faultBody(0)) {
		t.Fatalf("Read after the error cleared: %q, %v", rec.Body, err)
	}
	st := q.Stats()
	if st.CorruptRecords != 0 || st.BadFiles != 0 || st.ReadErrors != 1 {
		t.Fatalf("Stats after a transient error: %+v", st)
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) != 0 {
		t.Fatalf("healthy data quarantined: %v", bad)
	}
}
