package channel

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/memlog"
)

// TestTimersTiedDueReadOnce: more deferred messages due at the same moment
// than Options.MaxDeferredInMemory (as a topic's channel stores all it held
// at Close) are read from the timer store once, not again until those in
// memory are released. With the horizon a due time, the heap's earliest,
// due at the horizon's time, looked as if the store might hold one before
// it: each refill found the heap's own entries again and started the next,
// a loop reading the store until they were due (an hour here).
func TestTimersTiedDueReadOnce(t *testing.T) {
	s := memlog.NewLog()
	due := time.Now().Add(time.Hour).UnixNano()
	for i := range 7 {
		m := &Message{ID: ID(i + 1), Timestamp: time.Now(), Body: fmt.Appendf(nil, "m%d", i), due: due}
		if err := s.Put(context.Background(), appendEnvelope(nil, m)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Options{Backend: memlogStore(memlog.NewLog()), Timers: memlogStore(s), MaxDeferredInMemory: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The read at New, in the background: poll for its end (no event
	// tells it).
	deadline := time.Now().Add(10 * time.Second)
	for c.TimerStats().Refills == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the timer store was not read at New")
		}
		time.Sleep(time.Millisecond)
	}
	c.mu.Lock()
	tm := c.timers
	refills, again, inMemory := tm.refills, tm.refilling || tm.needRefill(), len(tm.heap)
	c.mu.Unlock()
	if refills != 1 || again || inMemory != 2 {
		t.Fatalf("after the read at New: %d reads, another running or wanted: %v, %d in memory; want 1, false, 2", refills, again, inMemory)
	}
}
