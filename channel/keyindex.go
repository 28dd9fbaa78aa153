package channel

import (
	"bytes"
	"hash/maphash"
	"math"
	"slices"
)

// keyIndex is the Put-time key policies' table (keyTable.ix): entries by
// key, without a Go map. The keys' bytes live in one arena and the entries
// in one slice, found through an open-addressing table of entry numbers,
// so a key costs no allocation once the table has grown, a lookup hashes
// the key once, and nothing in it holds a pointer for the garbage
// collector to scan (a large table of pending keys would otherwise cost a
// scan of every key at every collection). Not safe for concurrent use:
// keyTable.mu guards it (hash alone reads nothing but the seed, set at
// creation, and may run outside it).
//
// An entry's number is stable while it lives; a removed entry's number is
// reused, its gen then moved on, so that who kept a number (a Put between
// admit and commit, an expiry queue) can tell it is not theirs any more.
type keyIndex struct {
	seed maphash.Seed
	// slots holds per slot entry number + 1 in the low 32 bits (0 is
	// empty) and the top 32 bits of the key's hash in the high ones, which
	// also choose the slot (home): a probe passes other keys' slots
	// without loading their entries, and a removal moves the slots behind
	// the removed one back without loading theirs either. Linear probing
	// with removals that move slots back leaves no tombstones: every slot
	// not empty is a live key's, so a table whose keys come and go at a
	// steady number stays at its size, never rebuilt, and a key not in it
	// passes no removed keys' slots.
	slots []uint64
	ents  []keyEntry
	free  []int32 // numbers of removed entries, to reuse
	live  int
	// arena holds every live key's bytes (and removed ones' until the
	// next compaction of it, which keeps it within twice the live keys'
	// size); garbage counts the latter. Offsets are 32-bit: 4 GiB of keys
	// pending, 4 million of the longest, is past what this table serves.
	arena   []byte
	garbage int
	spare   []byte // the arena before the last compaction, reused by the next
}

// slot is what slots holds for entry n of a key with hash h.
func slot(n int32, h uint64) uint64 { return h&^math.MaxUint32 | uint64(n+1) }

// home is the slot a key whose slot holds s, or whose hash is s, probes
// from, in a table of mask+1 slots.
func home(s, mask uint64) uint64 { return s >> 32 & mask }

func newKeyIndex() *keyIndex {
	return &keyIndex{seed: maphash.MakeSeed(), slots: make([]uint64, 16)}
}

// hash is key's hash, for find and insert.
func (x *keyIndex) hash(key []byte) uint64 { return maphash.Bytes(x.seed, key) }

// find returns the number of the entry of key, whose hash is h, or -1.
func (x *keyIndex) find(key []byte, h uint64) int32 {
	mask := uint64(len(x.slots) - 1)
	tag := h &^ math.MaxUint32
	for i := home(h, mask); ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return -1
		}
		if s&^math.MaxUint32 == tag {
			n := int32(uint32(s) - 1)
			if e := &x.ents[n]; e.hash == h && bytes.Equal(x.keyOf(n), key) {
				return n
			}
		}
	}
}

// keyOf returns entry n's key, valid until the next insert or remove.
func (x *keyIndex) keyOf(n int32) []byte {
	e := &x.ents[n]
	return x.arena[e.koff : e.koff+uint32(e.klen)]
}

// insert adds key, whose hash is h and which must not be in the index,
// and returns the number of its entry, whose payload is zero: the caller
// sets it in place, which a Put's admit does under the table's lock, so a
// payload passed in would be one more copy of the entry there.
func (x *keyIndex) insert(key []byte, h uint64) int32 {
	if (x.live+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	var n int32
	if k := len(x.free); k > 0 {
		n = x.free[k-1]
		x.free = x.free[:k-1]
	} else {
		n = int32(len(x.ents))
		x.ents = append(grown(x.ents, 1), keyEntry{})
	}
	e := &x.ents[n]
	*e = keyEntry{hash: h, koff: uint32(len(x.arena)), klen: uint16(len(key)), live: true, gen: e.gen}
	x.arena = append(grown(x.arena, len(key)), key...)
	x.place(x.slots, slot(n, h))
	x.live++
	return n
}

// place puts s in the first empty slot from its home on.
func (x *keyIndex) place(slots []uint64, s uint64) {
	mask := uint64(len(slots) - 1)
	i := home(s, mask)
	for slots[i] != 0 {
		i = (i + 1) & mask
	}
	slots[i] = s
}

// grown returns s with room for n more, doubling its capacity when it
// has none: append grows a large slice by a quarter, which for a table
// growing to millions of keys copies every entry about four times over.
func grown[T any](s []T, n int) []T {
	if len(s)+n <= cap(s) {
		return s
	}
	return slices.Grow(s, max(n, len(s)))
}

// remove deletes entry n; its number may be reused from now on.
func (x *keyIndex) remove(n int32) {
	e := &x.ents[n]
	mask := uint64(len(x.slots) - 1)
	i := home(e.hash, mask)
	for uint32(x.slots[i]) != uint32(n+1) {
		i = (i + 1) & mask
	}
	// Move back into the hole each later slot of the run whose home is
	// not between the hole and it (cyclically), so that every key is
	// still found from its home without crossing an empty slot.
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		if s := x.slots[j]; (j-home(s, mask))&mask >= (j-i)&mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = 0
	x.garbage += int(e.klen)
	*e = keyEntry{gen: e.gen + 1}
	x.free = append(x.free, n)
	x.live--
	if x.garbage > 64<<10 && x.garbage > len(x.arena)/2 {
		x.compactArena()
	}
}

// retain removes every entry keep refuses (their numbers' gens move on, as
// remove's), in one pass over the entries and one over the slots.
func (x *keyIndex) retain(keep func(e *keyEntry) bool) {
	removed := false
	for n := range x.ents {
		if e := &x.ents[n]; e.live && !keep(e) {
			x.garbage += int(e.klen)
			*e = keyEntry{gen: e.gen + 1}
			x.free = append(x.free, int32(n))
			x.live--
			removed = true
		}
	}
	if !removed {
		return
	}
	clear(x.slots)
	for n := range x.ents {
		if e := &x.ents[n]; e.live {
			x.place(x.slots, slot(int32(n), e.hash))
		}
	}
	if x.garbage > 64<<10 && x.garbage > len(x.arena)/2 {
		x.compactArena()
	}
}

// grow doubles the slots, placing each key again from its slot alone.
func (x *keyIndex) grow() {
	slots := make([]uint64, 2*len(x.slots))
	for _, s := range x.slots {
		if s != 0 {
			x.place(slots, s)
		}
	}
	x.slots = slots
}

// compactArena copies the live keys into the spare arena, and keeps the
// old one as the next spare.
func (x *keyIndex) compactArena() {
	arena := x.spare[:0]
	for n := range x.ents {
		e := &x.ents[n]
		if !e.live {
			continue
		}
		k := x.arena[e.koff : e.koff+uint32(e.klen)]
		e.koff = uint32(len(arena))
		arena = append(arena, k...)
	}
	x.arena, x.spare, x.garbage = arena, x.arena, 0
}

// clear removes every entry (their numbers' gens move on, as remove's).
func (x *keyIndex) clear() {
	for n := range x.ents {
		if e := &x.ents[n]; e.live {
			*e = keyEntry{gen: e.gen + 1}
			x.free = append(x.free, int32(n))
		}
	}
	clear(x.slots)
	x.live, x.arena, x.spare, x.garbage = 0, nil, nil, 0
}

// each calls f with every live entry's number.
func (x *keyIndex) each(f func(n int32)) {
	for n := range x.ents {
		if x.ents[n].live {
			f(int32(n))
		}
	}
}
