package channel

import (
	"context"
	"sync"
	"sync/atomic"
)

// pauseGate is Pause's state. It has a lock of its own, a leaf (nothing is
// taken under it): pausing touches none of what Channel.mu guards, and a
// receiver about to wait for a message (take's pauseSignals) then does not
// contend with those adding to the ready list.
type pauseGate struct {
	// paused is written under mu (with the chans) and read without it on
	// the receive path.
	paused atomic.Bool
	mu     sync.Mutex
	// unpaused is closed by Unpause; made by Pause.
	unpaused chan struct{}
	// pausedCh is closed by Pause, for a receiver waiting for a message
	// and the Messages forwarder; made on demand while not paused.
	pausedCh chan struct{}
}

// Pause stops delivery: Receive waits until Unpause, also one waiting
// already (a message it was about to return goes back first in line), and
// the goroutine behind Messages holds back the message it holds (in
// flight, kept from timing out). Put goes on.
func (c *Channel) Pause() { c.pause.pause() }

// Unpause resumes delivery.
func (c *Channel) Unpause() { c.pause.unpause() }

func (c *Channel) isPaused() bool { return c.pause.paused.Load() }

func (g *pauseGate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused.Load() {
		g.paused.Store(true)
		g.unpaused = make(chan struct{})
		if g.pausedCh != nil {
			close(g.pausedCh)
			g.pausedCh = nil
		}
	}
}

func (g *pauseGate) unpause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused.Load() {
		g.paused.Store(false)
		close(g.unpaused)
	}
}

// signals returns, while the channel is not paused, a channel Pause
// closes (and nil), and while it is, nil and a channel Unpause closes.
func (g *pauseGate) signals() (paused, unpaused <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused.Load() {
		return nil, g.unpaused
	}
	if g.pausedCh == nil {
		g.pausedCh = make(chan struct{})
	}
	return g.pausedCh, nil
}

// waitUnpaused returns at once while the channel is not paused, else when
// Unpause comes, ctx ends (its error) or the channel closes (ErrClosed).
func (c *Channel) waitUnpaused(ctx context.Context) error {
	if !c.isPaused() {
		return nil
	}
	_, ch := c.pause.signals()
	if ch == nil {
		return nil // unpaused meanwhile
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closeCh:
		return ErrClosed
	}
}
