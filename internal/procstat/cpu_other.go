//go:build !unix

package procstat

import "time"

// CPUTime returns -1: this system's CPU time is not read here.
func CPUTime() time.Duration { return -1 }
