//go:build unix

package godq

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestImportFileModes: under a umask that takes nothing away, the import
// marker is the owner's alone (0600), as go-diskqueue's files are, and so
// is the spillq queue the backlog goes into (files 0600, directories
// 0700). The umask belongs to the process: this test is not parallel.
func TestImportFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	writeBacklog(t, dir, 20, 0)
	var l logCollector
	var markerMode fs.FileMode
	dq := newCompat("q", dir, 256, 0, 1<<10, 2500, time.Second, l.logf, func(point string) {
		if point != "marker-written" {
			return
		}
		info, err := os.Stat(filepath.Join(dir, "q"+markerSuffix))
		if err != nil {
			t.Errorf("the import marker: %v", err)
			return
		}
		markerMode = info.Mode().Perm()
	})
	defer dq.Close()
	drain(t, dq, records(0, 20))
	if markerMode != 0o600 {
		t.Errorf("the import marker: mode %#o, want 0600", uint32(markerMode))
	}
	if err := dq.Put([]byte("x")); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(filepath.Join(dir, "q.spillq"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %#o, want %#o", path, uint32(info.Mode().Perm()), uint32(want))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
