package peers

import (
	"runtime"
	"syscall"
)

// settle starts a benchmark from a quiet machine: the dirty pages the one
// before left (spillq's channel writes about 150 MB a million messages,
// which the kernel's writeback was still flushing) written back, and its
// garbage collected. Without it, bigqueue's Enqueue after the channel's
// runs took from 68 to 470 ns from run to run.
func settle() {
	syscall.Sync()
	runtime.GC()
}
