package vfs_test

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// syncRecorder is the OS's file system, recording the directories fsynced.
type syncRecorder struct {
	vfs.FS
	mu     sync.Mutex
	synced []string
}

func (r *syncRecorder) SyncDir(dir string) error {
	r.mu.Lock()
	r.synced = append(r.synced, dir)
	r.mu.Unlock()
	return r.FS.SyncDir(dir)
}

// TestMkdirAllSynced: each directory made has its entry fsynced in its
// parent, outermost first, and one already there costs no fsync.
func TestMkdirAllSynced(t *testing.T) {
	root := t.TempDir()
	rec := &syncRecorder{FS: vfs.OS}
	dir := filepath.Join(root, "a", "b", "c")
	if err := vfs.MkdirAllSynced(rec, dir, 0o700); err != nil {
		t.Fatal(err)
	}
	want := []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")}
	if !slices.Equal(rec.synced, want) {
		t.Fatalf("fsynced %q, want the parents of the three made, outermost first: %q", rec.synced, want)
	}
	if _, err := vfs.OS.Stat(dir); err != nil {
		t.Fatal(err)
	}
	rec.synced = nil
	if err := vfs.MkdirAllSynced(rec, dir, 0o700); err != nil || len(rec.synced) != 0 {
		t.Fatalf("again: %v, fsynced %q; want nothing made and nothing fsynced", err, rec.synced)
	}
}
