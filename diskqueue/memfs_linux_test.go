//go:build linux

package diskqueue

import (
	"sync"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

var (
	memfdOnce sync.Once
	memfdErr  error
)

// newMappedMemFS is a memFS whose files can be mapped (see
// vfs.NewCrashableMappedMem), so a queue on it appends and acknowledges
// through mappings as it does on a real Linux file system. Its stores are
// released when t ends (after the test's deferred Closes). It skips t
// where memfd_create is missing.
func newMappedMemFS(t testing.TB) *memFS {
	memfdOnce.Do(func() {
		var m *memFS
		if m, memfdErr = vfs.NewCrashableMappedMem(); memfdErr == nil {
			m.Release()
		}
	})
	if memfdErr != nil {
		t.Skipf("no memfd for a mapped memFS: %v", memfdErr)
	}
	m, err := vfs.NewCrashableMappedMem()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Release)
	return m
}

// memFSKinds are the memFS flavours a power-cut test runs on: on Linux
// both the write(2) path and the mapped one.
func memFSKinds() []memFSKind {
	return []memFSKind{
		{name: "write", new: func(testing.TB) *memFS { return newMemFS() }, path: "write"},
		{name: "mmap", new: newMappedMemFS, path: "mmap"},
	}
}
