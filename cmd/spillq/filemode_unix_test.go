//go:build unix

package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/spillq/spillq/internal/modetest"

	"github.com/spillq/spillq/diskqueue"
)

// TestToolFileModes: what the tool writes into a queue (a .bad copy, a
// named cursor, records) has the modes of the queue's own files, told by
// its directory, whether the service made them the owner's alone or the
// group's too; a queue the tool makes gets diskqueue's default. The umask
// is 0 (and the tool inherits it), so nothing but the tool decides; it
// belongs to the process: this test is not parallel.
func TestToolFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, c := range []struct{ mode, file, dir fs.FileMode }{
		{0, 0o600, 0o700},
		{0o640, 0o640, 0o750},
	} {
		t.Run(fmt.Sprintf("%#o", uint32(c.file)), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "q")
			q, err := diskqueue.Open(dir, diskqueue.Options{MaxSegmentBytes: 1 << 10, FileMode: c.mode})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if err := q.Put(context.Background(), fmt.Appendf(nil, "record %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			flip(t, dir, 60) // seq 1
			for _, args := range [][]string{
				{"repair", dir},
				{"cursor", "create", "audit", dir},
				{"put", "-raw", dir},
			} {
				if out, code := tool(t, "one\ntwo\n", args...); code != 0 {
					t.Fatalf("%v (%d):\n%s", args, code, out)
				}
			}
			seen := modetest.Check(t, dir, c.file, c.dir)
			for _, want := range []string{"00000000000000000000.log.49.bad", "cursors/audit", "cursors/audit/cursor"} {
				if !slices.Contains(seen, want) {
					t.Errorf("no %s among the files checked: %v", want, seen)
				}
			}
		})
	}
	// A new queue.
	dir := filepath.Join(t.TempDir(), "new")
	if out, code := tool(t, "one\n", "put", "-create", "-raw", dir); code != 0 {
		t.Fatalf("put -create (%d):\n%s", code, out)
	}
	modetest.Check(t, dir, 0o600, 0o700)
}
