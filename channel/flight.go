package channel

import "sync"

// flightList is the messages in flight, oldest deadline first. Its mu
// guards the list and the state, deadline and list links of every message
// in it.
//
// Lock order: flightList.mu, then Channel.mu. Requeue holds flightList.mu
// while it hands the message to the ready list, so Close and Empty, which
// take flightList.mu and then Channel.mu, never see a message that has
// left flight and not yet arrived anywhere.
//
// One lock, not one per shard of messages: 16 shards measured no faster
// on two cores (BenchmarkReceiveFinishParallel, -cpu 2,8), and cost Close
// and Empty a lock per shard.
type flightList struct {
	mu         sync.Mutex
	head, tail *Message
	n          int
}

// link appends m. Deadlines are Channel.now, read under f.mu, plus one
// fixed timeout, and Channel.now never goes back, so appending keeps the
// list sorted.
func (f *flightList) link(m *Message) {
	m.prev, m.next = f.tail, nil
	if f.tail != nil {
		f.tail.next = m
	} else {
		f.head = m
	}
	f.tail = m
	f.n++
}

func (f *flightList) unlink(m *Message) {
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		f.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		f.tail = m.prev
	}
	m.prev, m.next = nil, nil
	f.n--
}

// land takes m out of flight, reporting false if it was not in flight
// (finished, requeued, timed out or emptied already).
func (f *flightList) land(m *Message) bool {
	if m.state != stateInFlight {
		return false
	}
	f.unlink(m)
	m.state = stateDone
	return true
}

// dropLocked takes every message out of flight and returns them; the
// caller holds f.mu.
func (f *flightList) dropLocked() []*Message {
	var out []*Message
	for m := f.head; m != nil; m = m.next {
		m.state = stateDone
		out = append(out, m)
	}
	f.head, f.tail, f.n = nil, nil, 0
	return out
}

// len counts the messages in flight.
func (f *flightList) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
