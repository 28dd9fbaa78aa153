//go:build unix

package procstat

import (
	"syscall"
	"time"
)

// CPUTime returns the user and system CPU time this process has used,
// every thread together, or -1 where the system does not say.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
