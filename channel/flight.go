package channel

import "sync"

// flightShards is how many locks in-flight bookkeeping is spread over, so
// that consumers delivering and finishing different messages do not queue
// on one mutex. A message's shard follows from its ID, which Put hands out
// in sequence, so consecutive messages land on different shards.
// BenchmarkPipeline/work=crc/consumers=2 justifies it: with one lock it
// runs 14% slower.
const flightShards = 16

// flightList is one shard of the in-flight messages, oldest deadline first.
// Its mu guards the list and the state, deadline and list links of every
// message in it.
//
// Lock order (the package doc's Locks section has all of it): putMu, then
// shards in ascending index, then Channel.mu. Requeue holds its shard
// while it hands the message to the ready list, so Close and Empty, which
// take every shard and then Channel.mu, never see a message that has left
// flight and not yet arrived anywhere; one on its way to the timer store
// it hands over holding putMu shared instead, which Close waits for.
type flightList struct {
	mu         sync.Mutex
	head, tail *Message
	n          int
}

func (c *Channel) flightFor(m *Message) *flightList {
	return &c.flights[uint64(m.ID)%flightShards]
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

// lockFlights takes every shard, in order; unlockFlights releases them.
func (c *Channel) lockFlights() {
	for i := range c.flights {
		c.flights[i].mu.Lock()
	}
}

func (c *Channel) unlockFlights() {
	for i := range c.flights {
		c.flights[i].mu.Unlock()
	}
}

// dropFlightsLocked takes every message out of flight and returns them;
// the caller holds every shard.
func (c *Channel) dropFlightsLocked() []*Message {
	var out []*Message
	for i := range c.flights {
		f := &c.flights[i]
		for m := f.head; m != nil; m = m.next {
			m.state = stateDone
			out = append(out, m)
		}
		f.head, f.tail, f.n = nil, nil, 0
	}
	return out
}

// inFlight counts the messages in flight.
func (c *Channel) inFlight() int {
	n := 0
	for i := range c.flights {
		f := &c.flights[i]
		f.mu.Lock()
		n += f.n
		f.mu.Unlock()
	}
	return n
}
