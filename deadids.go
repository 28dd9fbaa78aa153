package spillq

import (
	"sync"

	"github.com/spillq/spillq/channel"
)

// deadIDs is the set of message IDs a dead-letter store holds letters of,
// with how many each (a store written by an older build, or an Add that
// failed after storing, may hold two of one). It makes Add idempotent per
// message across restarts: the channel acknowledges a message only after
// its handler stored it, so a crash in between brings the message back to
// be dead-lettered again, and the store, which already has it, must not
// list it twice. It is rebuilt from the store's records when the store
// opens, and kept in memory: a Go map entry per letter (about 20 to 40
// bytes, whatever the body's size).
type deadIDs struct {
	mu    sync.Mutex
	count map[channel.ID]uint32
	// adding is the Adds under way, each with a channel closed when it
	// is done: a second Add of one ID waits for the first's outcome
	// rather than take the letter for stored before it is.
	adding map[channel.ID]chan struct{}
}

func newDeadIDs() *deadIDs {
	return &deadIDs{count: map[channel.ID]uint32{}, adding: map[channel.ID]chan struct{}{}}
}

// begin starts an Add of id. It returns false if the store holds a
// letter of id already (nothing to add); else the caller stores the
// letter and calls end with whether it did. The letter is counted from
// here on, not from end: a Redrive or Purge may read it as soon as it is
// in the store, and uncount it (remove) before end; counted at end, it
// would stay counted after it left, and the message's next
// dead-lettering would store nothing, losing it.
func (s *deadIDs) begin(id channel.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		ch, busy := s.adding[id]
		if !busy {
			break
		}
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	if s.count[id] > 0 {
		return false
	}
	s.count[id] = 1
	s.adding[id] = make(chan struct{})
	return true
}

// end ends the Add of id that begin started; stored says whether the
// letter is in the store. One that is not is uncounted (if a Redrive or
// Purge did not already: the count may then fall short, which at worst
// stores a letter twice, never loses one).
func (s *deadIDs) end(id channel.ID, stored bool) {
	if !stored {
		s.remove(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.adding[id])
	delete(s.adding, id)
}

// add counts a letter of id found in the store.
func (s *deadIDs) add(id channel.ID) {
	s.mu.Lock()
	s.count[id]++
	s.mu.Unlock()
}

// remove uncounts a letter of id, before it leaves the store (Purge) or
// before its message goes back in its channel (Redrive): from then on a
// dead-lettering of that message stores a letter again. A letter that
// then stays (its acknowledgement failed, the channel refused it) is
// counted again with add.
func (s *deadIDs) remove(id channel.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n := s.count[id]; n {
	case 0:
	case 1:
		delete(s.count, id)
	default:
		s.count[id] = n - 1
	}
}
