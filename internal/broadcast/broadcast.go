// Package broadcast wakes every goroutine waiting for an event, for
// diskqueue, channel and nsqbridge.
package broadcast

import (
	"sync"
	"sync/atomic"
)

// Broadcast is an event many goroutines can wait for: Wait returns a
// channel that the next Notify closes. To avoid missing an event, take the
// channel before checking the condition it signals, and make the condition
// visible (an atomic store, or a store under a lock) before calling Notify.
// The zero value is ready to use; it is safe for concurrent use.
type Broadcast struct {
	// waiting is set while a channel is out, so Notify costs one atomic
	// load when nobody waits (the common case on a hot path). Wait sets it
	// before its caller checks the condition and Notify reads it after the
	// condition changed; with sequentially consistent atomics one of the
	// two sees the other.
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
}

// Wait returns the channel the next Notify closes.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
		b.waiting.Store(true)
	}
	return b.ch
}

// Notify wakes everyone waiting.
func (b *Broadcast) Notify() {
	if !b.waiting.Load() {
		return
	}
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
		b.waiting.Store(false)
	}
	b.mu.Unlock()
}
