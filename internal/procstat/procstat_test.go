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
	// Touching 64 MiB must raise the peak by most of that.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	if runtime.GOOS == "linux" && PeakRSSKB() < kb+32<<10 {
		t.Fatalf("peak did not follow a 64 MiB allocation: %d then %d", kb, PeakRSSKB())
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
