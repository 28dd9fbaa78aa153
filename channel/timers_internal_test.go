package channel

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// sliceTimers is a TimerStore in memory.
type sliceTimers struct {
	mu      sync.Mutex
	records map[uint64][]byte
	next    uint64
}

func (s *sliceTimers) Put(_ context.Context, body []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		s.records = map[uint64][]byte{}
	}
	seq := s.next
	s.next++
	s.records[seq] = append([]byte(nil), body...)
	return seq, nil
}

func (s *sliceTimers) Get(seq uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.records[seq]
	if !ok {
		return nil, fmt.Errorf("%w: sliceTimers: no record %d", ErrBadEnvelope, seq)
	}
	return b, nil
}

func (s *sliceTimers) Ack(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, seq)
	return nil
}

func (s *sliceTimers) Records() func(yield func(uint64, []byte, error) bool) {
	return func(yield func(uint64, []byte, error) bool) {
		s.mu.Lock()
		snap := make(map[uint64][]byte, len(s.records))
		for seq, b := range s.records {
			snap[seq] = b
		}
		s.mu.Unlock()
		for seq, b := range snap {
			if !yield(seq, b, nil) {
				return
			}
		}
	}
}

func (s *sliceTimers) Depth() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.records))
}

func (s *sliceTimers) Empty() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.records)
	return nil
}

func (s *sliceTimers) Close() error { return nil }

// TestTimersTiedDueReadOnce: more deferred messages due at the same moment
// than Options.MaxDeferredInMemory (as a topic's channel stores all it held
// at Close) are read from the timer store once, not again until those in
// memory are released. With the horizon a due time, the heap's earliest,
// due at the horizon's time, looked as if the store might hold one before
// it: each refill found the heap's own entries again and started the next,
// a loop reading the store until they were due (an hour here).
func TestTimersTiedDueReadOnce(t *testing.T) {
	s := &sliceTimers{}
	due := time.Now().Add(time.Hour).UnixNano()
	for i := range 7 {
		m := &Message{ID: ID(i + 1), Timestamp: time.Now(), Body: fmt.Appendf(nil, "m%d", i), due: due}
		if _, err := s.Put(context.Background(), appendEnvelope(nil, m)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Options{Backend: &takeBackend{}, Timers: s, MaxDeferredInMemory: 2})
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
