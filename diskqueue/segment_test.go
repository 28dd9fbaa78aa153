package diskqueue

import (
	"math"
	"testing"
)

func TestSegmentNameRoundTrip(t *testing.T) {
	for _, base := range []uint64{0, 1, 99, 1 << 40, math.MaxUint64} {
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			name := segmentName(base, suffix)
			if len(name) != segmentDigits+len(suffix) {
				t.Fatalf("%q: not %d digits", name, segmentDigits)
			}
			got, ok := parseSegmentName(name, suffix)
			if !ok || got != base {
				t.Fatalf("parse(%q) = %d, %v", name, got, ok)
			}
		}
	}
	for _, bad := range []string{"1.log", "0000000000000000000x.log", "00000000000000000000.index", "00000000000000000000.log.bad", "99999999999999999999.log"} {
		if _, ok := parseSegmentName(bad, logSuffix); ok {
			t.Fatalf("parse(%q) accepted", bad)
		}
	}
}
