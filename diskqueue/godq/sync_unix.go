//go:build !windows

package godq

import (
	"fmt"
	"os"
)

// syncDir makes the renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: sync %s: %w", errImport, dir, err)
	}
	return nil
}
