//go:build unix

package modetest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCheck: Check walks every entry, root included.
func TestCheck(t *testing.T) {
	ZeroUmask(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if seen := Check(t, root, 0o600, 0o700); !slices.Equal(seen, []string{".", "a"}) {
		t.Fatalf("saw %v", seen)
	}
}
