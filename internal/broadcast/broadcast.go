// Package broadcast wakes every goroutine waiting for an event, for
// diskqueue, channel and nsqbridge.
package broadcast

import "sync"

// Broadcast is an event many goroutines can wait for: Wait returns a
// channel that the next Notify closes. To avoid missing an event, take the
// channel before checking the condition it signals. The zero value is
// ready to use; it is safe for concurrent use.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns the channel the next Notify closes.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes everyone waiting.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}
