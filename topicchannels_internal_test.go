package spillq

import "testing"

// TestChannelSetTimerDepth: a closed channel's timer depth is read once
// and kept until the channel opens; a read that fails is not kept, nor one
// across which the channel opened and closed (its store may have changed
// under the read).
func TestChannelSetTimerDepth(t *testing.T) {
	s := newChannelSet()
	reads := 0
	read := func(n int64, ok bool) func() (int64, bool) {
		return func() (int64, bool) { reads++; return n, ok }
	}
	depth := func(want int64, wantReads int, r func() (int64, bool)) {
		t.Helper()
		if got := s.closedDepth(closedStore{"a", false}, r); got != want || reads != wantReads {
			t.Fatalf("timerDepth = %d after %d reads; want %d after %d", got, reads, want, wantReads)
		}
	}
	depth(0, 1, read(0, false))
	depth(3, 2, read(3, true))
	depth(3, 2, read(9, true)) // kept
	s.opened("a", openChannel{})
	s.closed("a", nil)
	depth(4, 3, read(4, true)) // read again once the channel has opened
	s.forget("a")
	depth(5, 4, func() (int64, bool) {
		reads++
		s.opened("a", openChannel{})
		s.closed("a", nil)
		return 5, true
	})
	depth(6, 5, read(6, true)) // the read across an opening was not kept
}
