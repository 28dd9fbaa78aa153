//go:build !linux

package vfs

import (
	"io/fs"
	"os"
)

// openOSFile opens a plain file: off Linux the queue appends with the
// producer's own write(2), which keeps the same guarantee (a Put that
// returned is in the kernel) without preallocation or mappings.
func openOSFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}
