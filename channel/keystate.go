package channel

import (
	"cmp"
	"slices"
	"time"
)

// The key state a restart picks up: a snapshot of a channel's key table
// (Channel.KeyState), and the table restored from one.

// firstID is the ID before a new channel's (or Fanout's) first message:
// the clock in nanoseconds, so IDs grow across restarts, and past every
// message st names, so that they grow even if the clock was set back
// (the key policies tell versions apart by ID).
func firstID(st *KeyState) uint64 {
	id := uint64(time.Now().UnixNano())
	if st != nil {
		for _, e := range st.Entries {
			id = max(id, uint64(e.ID))
		}
	}
	return id
}

// KeyState is a snapshot of a channel's key policy state ([Channel.KeyState]),
// for a backend that keeps it across restarts: spillq.Open keeps it in the
// queue's directory (FORMAT.md, "Key state") and gives it back through
// Options.KeyState, having brought it up to date with the records put
// after Watermark.
type KeyState struct {
	Policy KeyPolicy
	// Watermark is the backend's next seq when the snapshot was taken:
	// every keyed message stored below it is in Entries (unless done),
	// every one from it on is not.
	Watermark uint64
	Entries   []KeyEntry
}

// KeyEntry is one key in a [KeyState].
type KeyEntry struct {
	Key string
	// ID and Seq are the message and its backend record: under KeyUnique
	// the one pending, under KeyReplace the newest put.
	ID  ID
	Seq uint64
	// At is when the key was put (KeyDedup).
	At time.Time
}

// snapshot returns the entries a restart needs, and prunes restored
// KeyReplace entries (their versions not counted) whose newest version is
// below floor, the backend's oldest record not acknowledged, and KeyDedup
// entries put before the window as of now (as stats). Entries
// of messages that never reached the backend are left out: a crash loses
// those messages, and a graceful Close stores the ones still held first
// (so under KeyDedup a key whose message went through memory alone and
// was finished is not remembered across a restart).
//
// It copies only the raw entries and the key bytes under the table's lock
// (its caller holds Puts off the while, so that the watermark is exact);
// the KeyEntry values are made from the copy by keySnapshot.entries, after
// Puts go on: for a million keys pending, a pause of tens of milliseconds
// (20 to 70 measured on a loaded 2-core machine) where making them under
// the lock took 170 ms or more.
func (t *keyTable) snapshot(floor uint64, now int64) keySnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policy == KeyDedup {
		t.expireLocked(now) // what expired since the last Put
	}
	snap := keySnapshot{ents: make([]snapEntry, 0, t.ix.live), arena: string(t.ix.arena), dedup: t.policy == KeyDedup}
	var gone []int32
	t.ix.each(func(n int32) {
		e := &t.ix.ents[n]
		switch t.policy {
		case KeyUnique, KeyReplace:
			if t.topic() && t.policy == KeyUnique && e.hasSeq && e.seq < floor {
				// Every channel is done with it. (One done out of order,
				// above the floor, waits: asking each channel's bitmap for
				// every key would hold Puts up the while; the next Put of
				// its key asks.)
				gone = append(gone, n)
				return
			}
			if t.policy == KeyReplace && e.restored && e.hasSeq && e.seq < floor {
				// Restored, its versions not counted: the newest is
				// acknowledged, and so is every older one (all in the
				// backend, a restart holding none elsewhere: under
				// KeyReplace a keyed message never moves to the timer
				// store).
				gone = append(gone, n)
				return
			}
		case KeyDedup:
			// Only keys whose message reached the backend, as for the
			// others: after a crash one held in memory only is lost, and
			// the producer's retry must then be let in, not refused as a
			// duplicate.
		}
		if e.hasSeq || snap.dedup && e.kept {
			se := snapEntry{id: e.id, seq: e.seq, koff: e.koff, klen: e.klen}
			if snap.dedup {
				se.at = e.at()
			}
			snap.ents = append(snap.ents, se)
		}
	})
	for _, n := range gone {
		t.removeEntry(n)
	}
	return snap
}

// keySnapshot is what keyTable.snapshot copies under the lock: the
// entries a restart needs, their keys as offsets into a copy of the
// table's key arena.
type keySnapshot struct {
	ents  []snapEntry
	arena string // the keys' bytes: KeyEntry.Key values are slices of it
	dedup bool   // KeyDedup: each entry's At counts
}

type snapEntry struct {
	id   ID
	seq  uint64
	at   int64
	koff uint32
	klen uint16
}

// entries makes the snapshot's KeyEntry values. Their keys are slices of
// one string made of the arena: one allocation, not one per key.
func (s keySnapshot) entries() []KeyEntry {
	if len(s.ents) == 0 {
		return nil
	}
	keys := s.arena
	out := make([]KeyEntry, len(s.ents))
	for i, e := range s.ents {
		out[i] = KeyEntry{Key: keys[e.koff : e.koff+uint32(e.klen)], ID: e.id, Seq: e.seq}
		if s.dedup {
			out[i].At = time.Unix(0, e.at)
		}
	}
	return out
}

// restore loads a KeyState: restored KeyReplace entries know none of
// their versions (see keyEntry.restored).
func (t *keyTable) restore(st *KeyState, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var key []byte // find and insert copy it
	for _, ke := range st.Entries {
		key = append(key[:0], ke.Key...)
		p := keyEntry{id: ke.ID, seq: ke.Seq, hasSeq: true}
		switch t.policy {
		case KeyUnique:
		case KeyReplace:
			p.restored = true
		case KeyDedup:
			p.aux = uint64(ke.At.UnixNano()) // at
			if now-p.at() >= t.window {
				continue
			}
		default:
			continue
		}
		e, n, h := t.find(key)
		switch {
		case e == nil:
			n = t.ix.insert(key, h)
			t.ix.ents[n].setPayload(p)
		case t.policy == KeyDedup && e.at() >= p.at():
			continue
		default:
			e.setPayload(p)
		}
		if t.policy == KeyDedup {
			t.seenQ = append(t.seenQ, seenKey{p.at(), n, t.ix.ents[n].gen})
		}
	}
	slices.SortFunc(t.seenQ, func(a, b seenKey) int { return cmp.Compare(a.at, b.at) })
}
