//go:build unix

// Package modetest holds the test helpers that check the permissions of
// the files a queue creates, shared by the packages that create them.
package modetest

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
)

// ZeroUmask clears the process's umask until the test ends, so the modes
// on disk are the ones asked for and not the ones a usual umask (022)
// would have cut them down to. The umask belongs to the process: a test
// calling this must not be parallel, nor run beside tests that expect
// another.
func ZeroUmask(t testing.TB) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
}

// Check fails for each entry under root (root included) that is neither
// a directory of permission dir nor a regular file of permission file,
// and returns the paths it saw, relative to root, with forward slashes.
func Check(t testing.TB, root string, file, dir fs.FileMode) []string {
	t.Helper()
	var seen []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		want := file
		if d.IsDir() {
			want = dir
		}
		if got := info.Mode().Perm(); got != want || !d.IsDir() && !info.Mode().IsRegular() {
			t.Errorf("%s: mode %v (%#o), want %#o", rel, info.Mode(), uint32(info.Mode().Perm()), uint32(want))
		}
		seen = append(seen, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen
}
