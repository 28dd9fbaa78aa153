//go:build !linux

package diskqueue

import "testing"

// memFSKinds are the memFS flavours a power-cut test runs on: off Linux the
// queue appends with write(2) only.
func memFSKinds() []memFSKind {
	return []memFSKind{{name: "write", new: func(testing.TB) *memFS { return newMemFS() }, path: "write"}}
}
