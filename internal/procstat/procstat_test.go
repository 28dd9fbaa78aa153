package procstat

import (
	"runtime"
	"testing"
)

func TestPeakRSSKB(t *testing.T) {
	kb := PeakRSSKB()
	if runtime.GOOS == "linux" && kb <= 0 {
		t.Fatalf("PeakRSSKB = %d on Linux", kb)
	}
	// Touching 64 MiB makes at least that resident, and the peak is at
	// least what is resident. Not that it rises: in a process that ran
	// this test before (-count 2), the 64 MiB can reuse memory the peak
	// already counts.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	if rss := StatusKB("VmRSS:"); runtime.GOOS == "linux" && (rss < 64<<10 || int64(PeakRSSKB()) < rss) {
		t.Fatalf("with 64 MiB touched: resident %d KiB, peak %d KiB", rss, PeakRSSKB())
	}
	runtime.KeepAlive(b)
}

func TestCPUTimeMoves(t *testing.T) {
	before := CPUTime()
	if before < 0 {
		t.Skip("no CPU time on this system")
	}
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	if after := CPUTime(); after <= before {
		t.Fatalf("CPU time %v then %v after a busy loop (%d)", before, after, x)
	}
}
