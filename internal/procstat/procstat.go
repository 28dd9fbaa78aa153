// Package procstat reads this process's memory figures from /proc, for the
// benchmarks that report peak RSS.
package procstat

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PeakRSSKB returns VmHWM, the process's peak resident set in KiB, or -1
// where /proc does not say (not Linux).
func PeakRSSKB() int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return -1
			}
			return kb
		}
	}
	return -1
}
