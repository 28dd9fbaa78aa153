package channel

import (
	"slices"
	"sync/atomic"

	"github.com/spillq/spillq/internal/broadcast"
)

// readyList is the messages requeued, timed out or released when due,
// which receivers take before the memory buffer. Channel.mu guards msgs,
// as it does the deferred heap and the timer set they come from, so that a
// message leaving those (or its flight shard, held above Channel.mu) is on
// the ready list in the same step, and Close and Empty, which take it
// under Channel.mu, never see it in neither. n and bell are read without
// the lock: the receive path sees an empty list, and waits for one that
// is not, without taking it.
type readyList struct {
	msgs []*Message
	// n is len(msgs), written under Channel.mu.
	n atomic.Int64
	// bell wakes the receivers waiting in take when msgs gains a message;
	// whoever adds rings it once it has let go of Channel.mu.
	bell broadcast.Broadcast
}

// addLocked appends m; the caller holds Channel.mu, and rings after.
func (r *readyList) addLocked(m *Message) {
	r.msgs = append(r.msgs, m)
	r.n.Store(int64(len(r.msgs)))
}

// pushFrontLocked puts m first in line (a message taken and not
// delivered); the caller holds Channel.mu, and rings after.
func (r *readyList) pushFrontLocked(m *Message) {
	r.msgs = slices.Insert(r.msgs, 0, m)
	r.n.Store(int64(len(r.msgs)))
}

// popLocked takes the oldest message, or returns nil; the caller holds
// Channel.mu.
func (r *readyList) popLocked() *Message {
	if len(r.msgs) == 0 {
		return nil
	}
	m := r.msgs[0]
	r.msgs[0] = nil
	r.msgs = r.msgs[1:]
	r.n.Store(int64(len(r.msgs)))
	return m
}

// takeAllLocked empties the list, returning what it held; the caller
// holds Channel.mu.
func (r *readyList) takeAllLocked() []*Message {
	msgs := r.msgs
	r.msgs = nil
	r.n.Store(0)
	return msgs
}

// empty reports, without the lock, whether the list looked empty.
func (r *readyList) empty() bool { return r.n.Load() == 0 }

// len is the list's length, read without the lock.
func (r *readyList) len() int64 { return r.n.Load() }

// ring wakes the receivers waiting for a ready message.
func (r *readyList) ring() { r.bell.Notify() }

// wait returns a chan closed at the next ring: a receiver registers, looks
// again, then waits, so a message added between its look and its wait is
// not missed.
func (r *readyList) wait() <-chan struct{} { return r.bell.Wait() }

// popReady takes the oldest ready message, or returns nil, taking
// Channel.mu only when the list looks non-empty.
func (c *Channel) popReady() *Message {
	if c.ready.empty() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready.popLocked()
}
