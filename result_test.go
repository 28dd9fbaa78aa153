package spillq_test

import (
	"testing"
	"time"

	"github.com/spillq/spillq"
)

func TestExponentialBackoff(t *testing.T) {
	b := spillq.ExponentialBackoff(time.Second, time.Minute)
	for attempts, ceiling := range map[uint16]time.Duration{
		0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second,
		7: time.Minute, 100: time.Minute, 65535: time.Minute,
	} {
		var top time.Duration
		for range 2000 {
			d := b(attempts, nil)
			if d < 0 || d >= ceiling {
				t.Fatalf("attempts %d: delay %v outside [0, %v)", attempts, d, ceiling)
			}
			top = max(top, d)
		}
		// Full jitter: the draws reach the top of the range (2000 draws
		// all below 90% of it: a chance of 1e-2000).
		if top < ceiling*9/10 {
			t.Errorf("attempts %d: largest of 2000 delays %v, want near %v", attempts, top, ceiling)
		}
	}
}
