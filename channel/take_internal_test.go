package channel

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fifoBackend keeps what is put, in order; Read waits for a record.
type fifoBackend struct {
	mu      sync.Mutex
	records [][]byte
	next    int
	added   chan struct{} // a token when a record was added
}

func newFIFOBackend() *fifoBackend { return &fifoBackend{added: make(chan struct{}, 1)} }

func (b *fifoBackend) Put(_ context.Context, body []byte) error {
	b.mu.Lock()
	b.records = append(b.records, append([]byte(nil), body...))
	b.mu.Unlock()
	select {
	case b.added <- struct{}{}:
	default:
	}
	return nil
}

func (b *fifoBackend) Read(ctx context.Context) (uint64, []byte, error) {
	for {
		b.mu.Lock()
		if b.next < len(b.records) {
			seq, body := uint64(b.next), b.records[b.next]
			b.next++
			b.mu.Unlock()
			return seq, body, nil
		}
		b.mu.Unlock()
		select {
		case <-b.added:
		case <-ctx.Done():
			return 0, nil, ErrClosed
		}
	}
}

func (b *fifoBackend) Ack(uint64) error { return nil }
func (b *fifoBackend) Empty() error     { return nil }
func (b *fifoBackend) Close() error     { return nil }

func (b *fifoBackend) Depth() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.records) - b.next)
}

// TestTakeMemoryBeforeReadAhead: a receiver that comes to wait as a
// message reaches the memory buffer and a newer one, spilled, the pump's
// read-ahead, takes the older from memory. Its wait chose at random
// between the two, so a spill drained out of put order now and then
// (TestSpillAndDrain under -race -cpu 1). The hook makes both ready for
// the wait every time; with the random choice, 64 rounds pass by chance
// one time in 2^64.
func TestTakeMemoryBeforeReadAhead(t *testing.T) {
	for round := range 64 {
		b := newFIFOBackend()
		c, err := New(Options{MemQueueSize: 1, Backend: b, MsgTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		once := false
		c.takeWaitsForTesting = func() {
			if once {
				return
			}
			once = true
			// "older" fills the memory buffer, so "newer" spills.
			for _, body := range []string{"older", "newer"} {
				if err := c.Put(ctx, []byte(body)); err != nil {
					t.Error(err)
				}
			}
			for c.ahead.len() == 0 {
				time.Sleep(time.Millisecond) // the pump reads "newer"
			}
		}
		for _, want := range []string{"older", "newer"} {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Body) != want {
				t.Fatalf("round %d: received %q, want %q: memory's message after the backend's newer one", round, m.Body, want)
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
