package channel_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// TestTimersRefillSkipsReleased: with more deferred messages due than
// Options.MaxDeferredInMemory, all of them come though none is finished.
// A read of the timer store kept the released ones (in flight) among the
// earliest, found nothing new, and ran again at once, until they were
// finished: with the consumers holding them, the rest never came.
func TestTimersRefillSkipsReleased(t *testing.T) {
	c := newChannel(t, channel.Options{Backend: newMemStore().store(), Timers: newMemStore().store(), MaxDeferredInMemory: 2})
	defer c.Close()
	for i := range 7 {
		if err := c.PutWith(context.Background(), fmt.Appendf(nil, "held%d", i), channel.PutOptions{Delay: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	got := receiveBodies(t, c, 7)
	if slices.Sort(got); !slices.Equal(got, heldBodies(7)) {
		t.Fatalf("got %v", got)
	}
	if st := c.TimerStats(); st.Refills > 5 {
		t.Errorf("%d reads of the timer store for 7 records, 2 at a time; want at most 5", st.Refills)
	}
}
