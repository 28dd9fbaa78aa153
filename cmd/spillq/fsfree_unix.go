//go:build unix

package main

import "golang.org/x/sys/unix"

// freeBytes is how many bytes of the file system holding dir an
// unprivileged writer may still use, or -1 if it cannot be told.
func freeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	// Conversions: the fields are of other types on other systems.
	return int64(st.Bavail) * int64(st.Bsize)
}
