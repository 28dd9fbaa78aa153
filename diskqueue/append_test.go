package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

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
