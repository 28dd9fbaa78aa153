package godq

// syncDir is a no-op on Windows: a directory cannot be opened for fsync
// there, and NTFS journals renames and removals itself.
func syncDir(string) error { return nil }
