// Package procstat reads this process's memory figures from /proc, for the
// benchmarks and tests that report resident memory.
package procstat

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PeakRSSKB returns VmHWM, the process's peak resident set in KiB, or -1
// where /proc does not say (not Linux).
func PeakRSSKB() int { return int(StatusKB("VmHWM:")) }

// StatusKB returns one "kB" field of /proc/self/status (its name with the
// colon, such as "RssAnon:"), or -1 where /proc does not say.
func StatusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb
		}
	}
	return -1
}
