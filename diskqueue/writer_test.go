package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestFsyncFailureIsSticky: after a failed fsync the queue never claims
// durability again; every later Put and Close return the error; records
// acknowledged before it survive a reopen.
func TestFsyncFailureIsSticky(t *testing.T) {
	efs := &errorFS{}
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{FS: efs, SyncEvery: 1})
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
	err := q.Put(ctx, faultBody(5))
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
	q = mustOpen(t, dir, Options{})
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
