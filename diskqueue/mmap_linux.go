//go:build linux

package diskqueue

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func unmap(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b)
}

// prefault makes the kernel map b's pages writable now, so a producer
// copying a record there takes no page fault: on a shared file mapping a
// page mapped only for reading takes a write-protect fault (page_mkwrite)
// on its first store. It changes no byte, so it is safe while producers
// write into the same pages. The pages it dirties hold zeros that only a
// whole-file fsync would write back, and the sync policy syncs just the
// written range (SyncMapped). Kernels older than 5.14 lack
// MADV_POPULATE_WRITE; the faults then happen on first write, as they
// would anyway.
func prefault(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	}
}

// pageSize is the unit of the kernel's mappings.
var pageSize = os.Getpagesize()

// dropPages removes b's pages from the mapping (MADV_DONTNEED): the
// writer's, once records have filled them, and a reader's, once it is done
// with them, so they leave the process's resident set. For a shared file
// mapping that loses nothing: the pages stay in the page cache, with their
// dirty state, and a later touch maps them again.
func dropPages(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_DONTNEED)
	}
}

// notSupported reports an error meaning the file system cannot preallocate
// or map, so the queue falls back to writing with write(2).
func notSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL)
}
