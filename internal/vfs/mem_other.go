//go:build !linux

package vfs

import (
	"errors"
	"fmt"
)

// NewCrashableMappedMem fails off Linux, where the queue maps no file.
func NewCrashableMappedMem() (*MemFS, error) {
	return nil, fmt.Errorf("vfs: a mapped MemFS needs Linux's memfd: %w", errors.ErrUnsupported)
}
