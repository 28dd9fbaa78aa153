package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// TestTransientReadErrorIsNotCorruption: an I/O error while reading is
// returned to the caller and the same record is read by the next call; it
// is never counted as corruption or quarantined (go-diskqueue renames
// healthy files to .bad on such errors).
func TestTransientReadErrorIsNotCorruption(t *testing.T) {
	efs := &errorFS{}
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{FS: efs})
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
