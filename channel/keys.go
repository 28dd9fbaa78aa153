package channel

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// KeyPolicy is what a channel does with the keys messages carry
// ([PutOptions].Key), chosen by Options.Keys. A message without a key is
// never affected.
type KeyPolicy uint8

const (
	// KeyNone carries keys (Message.Key) and enforces nothing: the default.
	KeyNone KeyPolicy = iota
	// KeyUnique refuses a Put whose key has a message pending: put and not
	// yet finished (or dead-lettered), wherever it waits, in flight and
	// deferred included. Put returns [ErrDuplicate] (a [*DuplicateError]
	// naming the pending message), or nil with Options.DuplicatesOK;
	// either way the message is dropped and counted in Stats.Duplicates.
	// The job-queue "unique job".
	KeyUnique
	// KeyReplace is "latest wins": a Put supersedes the pending message
	// with the same key, which is never delivered (it is acknowledged and
	// counted in Stats.Superseded when the channel reaches it); consumers
	// see only the newest version. A superseded message already in flight
	// is not taken back: its Finish and Touch work as any message's, but
	// a Requeue or a timeout ends it as superseded (acknowledged, not
	// delivered again).
	KeyReplace
	// KeyDedup drops a Put whose key was put within Options.DedupWindow,
	// pending or not (idempotent producers): Put returns [ErrDuplicate], or
	// nil with Options.DuplicatesOK, and counts it in Stats.Duplicates.
	// The error is a [*DuplicateError] naming the message put before, so
	// a producer's retry learns that message's ID.
	//
	// A Put that returned an error wrapping [ErrNotDurable] stored its
	// message, and so took the key: a retry within the window is refused
	// as a duplicate, naming that message. Only a Put whose error does not
	// wrap ErrNotDurable left the key free.
	KeyDedup
	// KeySerial delivers at most one message per key at a time: a message
	// whose key has one in flight (or requeued, or timed out and waiting
	// to be delivered again) waits behind it, in put order, while messages
	// of other keys flow past. Order per key is put order, retries and
	// graceful restarts included: at Close a keyed message read from the
	// backend stays where it is there (its attempts since it was stored
	// are then not counted, and one requeued with a delay, which waits in
	// memory with its record in place rather than in the timer store (up
	// to Options.MaxDeferredInMemory of them; past that one goes to the
	// timer store, and may come after its key's next message), comes again
	// at once), except that messages that came through the
	// memory buffer (Options.MemQueueSize: in it, in flight or requeued)
	// go to the backend behind the others, and that on a topic's channel
	// what it held in memory or deferred goes to its timer store and comes
	// first. Nothing of it is kept across a restart: the next run holds no
	// key. A message put with a Delay holds no key until it is delivered.
	KeySerial
)

func (p KeyPolicy) String() string {
	switch p {
	case KeyNone:
		return "none"
	case KeyUnique:
		return "unique"
	case KeyReplace:
		return "replace"
	case KeyDedup:
		return "dedup"
	case KeySerial:
		return "serial"
	}
	return fmt.Sprintf("KeyPolicy(%d)", uint8(p))
}

// DefaultDedupWindow is Options.DedupWindow's default.
const DefaultDedupWindow = 10 * time.Minute

// keyTable is a channel's key state under its policy. Its mu is taken
// after the in-flight shards' locks and after Channel.mu, never before.
type keyTable struct {
	policy KeyPolicy
	window int64 // KeyDedup: ns
	// settled is set for a topic's table ([Fanout]), kept at Put for every
	// channel (see topic): it reports whether every channel has
	// acknowledged a record.
	settled func(seq uint64) bool

	mu sync.Mutex
	// ix holds the Put-time policies' state per key: under KeyUnique its
	// pending message, under KeyReplace its newest, under KeyDedup when it
	// was last put. A Put finds its entry again after the backend's Put by
	// its number (commit), without a second lookup. In the table, not
	// behind a pointer: one dependent load less for every keyed Put.
	ix keyIndex
	// more holds, under KeyReplace, the pending versions of an entry past
	// its oldest (keyEntry.v0), by entry number: most keys have one.
	more map[int32][]ID
	// seenQ holds KeyDedup's puts in order, for expiry, from seenQ[seenHead]
	// on: expiry moves the head, and the slice is copied down only once
	// the head has passed half of it, so each put is copied once at most.
	seenQ    []seenKey
	seenHead int
	// held is, under KeySerial, the message being worked on per key, and
	// waiting the messages behind it, in put order.
	held    map[string]ID
	waiting map[string][]*Message

	duplicates, superseded atomic.Int64
}

// keyEntry is one key's state under a Put-time policy: its payload (id to
// hasSeq), and keyIndex's bookkeeping.
type keyEntry struct {
	// id is, under KeyReplace, the newest version whose Put succeeded
	// (0 while none has): a version still being put supersedes nothing,
	// since its Put may yet fail. Under the other policies it is the
	// message the entry is for.
	id ID
	// seq is the backend record of message id, once known (hasSeq): what
	// a restart checks the entry against.
	seq uint64
	// aux is, under KeyDedup, when the key was put (at), and under
	// KeyReplace the oldest version put and not yet done (v0): one word
	// for the two, each policy's own, keeps an entry to 48 bytes.
	aux uint64
	// restored says the entry came from a KeyState: its versions are not
	// known, and it goes once the backend's floor has passed seq (see
	// snapshot).
	restored bool
	hasSeq   bool
	// kept says message id is in the backend or the timer store, where a
	// restart has it (KeyDedup remembers only those keys).
	kept bool

	live bool
	klen uint16
	koff uint32 // the key's bytes in keyIndex.arena
	gen  uint32 // moves on when the entry's number is freed
	hash uint64
}

// keyEntry is 48 bytes. A keyed Put writes its entry, and with a thousand
// keys pending a thousand entries are touched between two uses of one;
// freed numbers are reused last freed first, so they are mostly touched
// in order, and the fewer lines they take, the fewer a Put waits for.
var _ = [1]struct{}{}[unsafe.Sizeof(keyEntry{})-48]

// at is when a KeyDedup entry's key was put, Unix ns.
func (e *keyEntry) at() int64 { return int64(e.aux) }

// v0 is a KeyReplace entry's oldest version put and not yet done (0 when
// none; IDs are never 0), the others in keyTable.more, so the entry
// outlives every older version it supersedes. By ID, not a count, so that
// a version done twice over (taken from a segment's old files while
// compaction removed it from the new) counts once.
func (e *keyEntry) v0() ID { return ID(e.aux) }

// setPayload replaces e's payload with p's, keeping its bookkeeping.
func (e *keyEntry) setPayload(p keyEntry) {
	e.id, e.seq, e.aux, e.restored, e.hasSeq, e.kept = p.id, p.seq, p.aux, p.restored, p.hasSeq, p.kept
}

// pending reports whether the entry has a version not done, as far as it
// knows.
func (e *keyEntry) pending() bool { return e.restored || e.v0() != 0 }

type seenKey struct {
	at  int64
	n   int32 // the entry, while its gen is gen
	gen uint32
}

// topic reports whether t is a topic's table: its entries know no
// versions (as if restored, see keyEntry.restored), and under KeyUnique an
// entry goes once every channel has acknowledged its record (settled),
// there being no one done to wait for.
func (t *keyTable) topic() bool { return t.settled != nil }

// newKeyTable returns a channel's table, or with settled a topic's (see
// keyTable.topic), holding st if a restart gave one.
func newKeyTable(policy KeyPolicy, window time.Duration, settled func(seq uint64) bool, st *KeyState) (*keyTable, error) {
	if st != nil && st.Policy != policy {
		return nil, fmt.Errorf("%w: KeyState is of policy %v, Keys is %v", ErrInvalidOptions, st.Policy, policy)
	}
	t := &keyTable{policy: policy, window: int64(window), settled: settled}
	if policy == KeySerial {
		t.held, t.waiting = map[string]ID{}, map[string][]*Message{}
	} else {
		t.ix, t.more = *newKeyIndex(), map[int32][]ID{}
	}
	if st != nil {
		t.restore(st, time.Now().UnixNano())
	}
	return t, nil
}

// lookup returns key's entry and its number, or nil and -1. The pointer
// is good until the next insert.
func (t *keyTable) lookup(key []byte) (*keyEntry, int32) {
	e, n, _ := t.find(key)
	return e, n
}

// find is lookup that also returns key's hash, for an insert of key
// after it.
func (t *keyTable) find(key []byte) (*keyEntry, int32, uint64) {
	h := t.ix.hash(key)
	n := t.ix.find(key, h)
	if n < 0 {
		return nil, -1, h
	}
	return &t.ix.ents[n], n, h
}

// entryOf returns entry n if it is still the one of generation gen.
func (t *keyTable) entryOf(n int32, gen uint32) *keyEntry {
	if n < 0 {
		return nil
	}
	if e := &t.ix.ents[n]; e.live && e.gen == gen {
		return e
	}
	return nil
}

func (t *keyTable) removeEntry(n int32) {
	t.ix.remove(n)
	if len(t.more) > 0 {
		delete(t.more, n)
	}
}

// addVersion counts version id of entry n as pending (KeyReplace).
func (t *keyTable) addVersion(n int32, id ID) {
	switch e := &t.ix.ents[n]; {
	case e.restored:
	case e.v0() == 0:
		e.aux = uint64(id)
	default:
		t.more[n] = append(t.more[n], id)
	}
}

// dropVersion forgets version id of entry n, and reports whether it was
// pending. Versions are mostly done in put order, so the oldest is looked
// at first.
func (t *keyTable) dropVersion(n int32, id ID) bool {
	e, more := &t.ix.ents[n], t.more[n]
	i := slices.Index(more, id)
	switch {
	case e.v0() == id:
		e.aux = 0
		if len(more) == 0 {
			return true
		}
		e.aux, i = uint64(more[0]), 0
	case i < 0:
		return false
	}
	if more = slices.Delete(more, i, i+1); len(more) == 0 {
		delete(t.more, n)
	} else {
		t.more[n] = more
	}
	return true
}

// hasVersion reports whether version id of entry n is pending.
func (t *keyTable) hasVersion(n int32, id ID) bool {
	return t.ix.ents[n].v0() == id || slices.Contains(t.more[n], id)
}

// admitted is what admit did, for commit and undo: three words, returned
// in registers.
type admitted struct {
	n    int32 // the entry the Put counts in, of generation gen; -1 if none
	gen  uint32
	made bool // admit inserted it; else (KeyReplace) it added a version to it
}

var notAdmitted = admitted{n: -1}

// admit decides a Put of a message with key and id at now (Unix ns): it
// returns a *DuplicateError naming the message that holds the key for one
// the policy refuses, and otherwise records it
// and returns what commit completes once the Put succeeded, or undo takes
// back if it failed.
//
// An entry that no longer counts (KeyUnique: a topic's, every channel done
// with it; KeyDedup: put before the window, not yet expired) is removed and
// the key inserted afresh, not given the new payload in place: undo then
// removes it as any other, and a Put still holding the old entry's number
// finds it gone, not taken over (with the payload replaced in place, that
// Put's undo removed the new Put's entry).
func (t *keyTable) admit(key []byte, id ID, now int64) (admitted, error) {
	switch t.policy {
	case KeyUnique, KeyReplace, KeyDedup:
	default:
		return notAdmitted, nil
	}
	h := t.ix.hash(key) // before the lock: the seed never changes
	t.mu.Lock()
	if t.policy == KeyDedup {
		t.expireLocked(now) // first: it may remove key's entry
	}
	if n := t.ix.find(key, h); n >= 0 {
		e := &t.ix.ents[n]
		switch t.policy {
		case KeyUnique:
			if !(t.topic() && e.hasSeq && t.settled(e.seq)) {
				holder := e.id // under the lock: e may be reused after
				t.mu.Unlock()
				t.duplicates.Add(1)
				return notAdmitted, &DuplicateError{Key: key, ID: holder, Policy: KeyUnique}
			}
		case KeyReplace:
			// The newest stored version stays the one that supersedes
			// until this one's Put has succeeded (commit).
			t.addVersion(n, id)
			a := admitted{n: n, gen: e.gen}
			t.mu.Unlock()
			return a, nil
		case KeyDedup:
			if ago := now - e.at(); ago < t.window {
				holder := e.id
				t.mu.Unlock()
				t.duplicates.Add(1)
				return notAdmitted, &DuplicateError{Key: key, ID: holder, Policy: KeyDedup, Age: time.Duration(ago)}
			}
		}
		t.removeEntry(n)
	}
	n := t.ix.insert(key, h)
	e := &t.ix.ents[n]
	switch t.policy {
	case KeyUnique:
		e.id = id
	case KeyReplace:
		if t.topic() {
			e.restored = true
		} else {
			e.aux = uint64(id) // v0
		}
	case KeyDedup:
		e.id, e.aux = id, uint64(now) // at
		t.seenQ = append(t.seenQ, seenKey{now, n, e.gen})
	}
	a := admitted{n: n, gen: e.gen, made: true}
	t.mu.Unlock()
	return a, nil
}

// undo takes back what admit did for a Put of message id with key that
// then failed.
func (t *keyTable) undo(id ID, a admitted) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryOf(a.n, a.gen)
	if e == nil {
		return // gone meanwhile
	}
	if t.policy == KeyReplace {
		switch {
		case e.restored:
			if a.made && e.id == 0 {
				t.removeEntry(a.n) // no version of it was ever stored
			}
		case t.dropVersion(a.n, id) && !e.pending():
			t.removeEntry(a.n)
		}
		return
	}
	t.removeEntry(a.n)
}

// commit records that the Put admit let in, of message id, succeeded: in
// backend record seq if src is srcBackend, in the timer store if
// srcTimers, in memory only if srcMemory. Under KeyReplace it is now the
// version that supersedes the older ones. An entry that has left the table
// meanwhile (every version done already) is not touched.
func (t *keyTable) commit(a admitted, id ID, seq uint64, src msgSource) {
	if a.n < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryOf(a.n, a.gen)
	if e == nil {
		return
	}
	if t.policy == KeyReplace && id > e.id {
		e.id, e.seq, e.hasSeq, e.kept = id, 0, false, false
	}
	if e.id == id {
		e.keptIn(seq, src)
	}
}

// keptIn records that e's message is in backend record seq (src
// srcBackend) or in the timer store (srcTimers); srcMemory changes nothing.
func (e *keyEntry) keptIn(seq uint64, src msgSource) {
	if src == srcMemory {
		return
	}
	e.kept = true
	if src == srcBackend {
		e.seq, e.hasSeq = seq, true
	}
}

// stored records where message id with key went later (Close stores
// again what it held): backend record seq (srcBackend) or the timer store
// (srcTimers), so a snapshot can name it (a KeyDedup one keep its key).
func (t *keyTable) stored(key []byte, id ID, seq uint64, src msgSource) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, _ := t.lookup(key); e != nil && e.id == id {
		e.keptIn(seq, src)
	}
}

// expireLocked forgets the keys put before the dedup window.
func (t *keyTable) expireLocked(now int64) {
	i := t.seenHead
	for i < len(t.seenQ) && now-t.seenQ[i].at >= t.window {
		i++
	}
	switch expired := i - t.seenHead; {
	case expired == 0:
	case expired >= 64 && 2*expired >= len(t.ix.ents) && 8*expired >= len(t.ix.slots):
		// Most of the table at once (the first Put after a pause longer
		// than the window): a pass over the entries and one over the
		// slots, in order, cost less than a probe of a slot at random per
		// key, and the bounds keep them within a few times the keys
		// expired.
		t.ix.retain(func(e *keyEntry) bool { return now-e.at() < t.window })
	default:
		for _, s := range t.seenQ[t.seenHead:i] {
			if e := t.entryOf(s.n, s.gen); e != nil && e.at() == s.at {
				t.removeEntry(s.n)
			}
		}
	}
	t.seenHead = i
	if i > len(t.seenQ)/2 {
		t.seenQ = append(t.seenQ[:0], t.seenQ[i:]...)
		t.seenHead = 0
	}
}

// take decides whether m, taken for delivery, may go out now: false under
// KeyReplace for a superseded message (drop it), and under KeySerial for
// one whose key another message holds (it was parked behind it).
func (t *keyTable) take(m *Message) (deliver, drop bool) {
	if t.policy != KeyReplace && t.policy != KeySerial {
		return true, false // the others decide at Put
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.policy {
	case KeyReplace:
		// Newer, not merely other: a version taken before its own Put
		// has committed is the newest.
		if e, n := t.lookup(m.Key); e != nil && e.id > m.ID {
			if e.restored || t.hasVersion(n, m.ID) {
				t.superseded.Add(1) // else compaction counted it (compacted)
			}
			return false, true
		}
	case KeySerial:
		if id, ok := t.held[string(m.Key)]; ok && id != m.ID {
			k := string(m.Key)
			t.waiting[k] = append(t.waiting[k], m)
			return false, false
		}
		t.held[string(m.Key)] = m.ID
	}
	return true, false
}

// done records that the message id with key will not be delivered again:
// finished, dead-lettered, expired or superseded. Under KeySerial it
// returns the message now next for the key, if one waits.
func (t *keyTable) done(key []byte, id ID) *Message {
	if t.policy == KeyDedup {
		return nil // the window, not the message, ends its key
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.policy {
	case KeyUnique:
		if e, n := t.lookup(key); e != nil && e.id == id {
			t.removeEntry(n)
		}
	case KeyReplace:
		// Any version: the entry goes with the last of them.
		if e, n := t.lookup(key); e != nil && t.dropVersion(n, id) && !e.pending() {
			t.removeEntry(n)
		}
	case KeySerial:
		if held, ok := t.held[string(key)]; !ok || held != id {
			return nil
		}
		q := t.waiting[string(key)]
		if len(q) == 0 {
			delete(t.held, string(key))
			return nil
		}
		next := q[0]
		q[0] = nil
		if q = q[1:]; len(q) == 0 {
			delete(t.waiting, string(key))
		} else {
			t.waiting[string(key)] = q
		}
		t.held[string(key)] = next.ID
		return next
	}
	return nil
}

// empty forgets every pending message (Channel.Empty). The dedup window
// remembers puts, not messages, so it stays.
func (t *keyTable) empty() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policy != KeySerial && t.policy != KeyDedup {
		t.ix.clear()
		clear(t.more)
	}
	clear(t.held)
	clear(t.waiting)
}

// parked returns the messages waiting behind a held key (KeySerial), and
// forgets them, for Close.
func (t *keyTable) parked() []*Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Message
	for k, q := range t.waiting {
		out = append(out, q...)
		delete(t.waiting, k)
	}
	return out
}

// supersedes reports whether a newer message with key than id has been
// stored (KeyReplace): a topic's channel drops the older one as it takes it.
func (t *keyTable) supersedes(key []byte, id ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, _ := t.lookup(key)
	return e != nil && e.id > id
}

// compacted records that compaction removed message id with key from the
// backend before the channel read it: under KeyReplace a superseded
// version, done now, and counted here since take will never see it.
func (t *keyTable) compacted(key []byte, id ID) {
	if t.policy != KeyReplace {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.superseded.Add(1)
	if e, n := t.lookup(key); e != nil && t.dropVersion(n, id) && !e.pending() {
		t.removeEntry(n)
	}
}

// stats is the table's part of Stats.
// now is the time on the clock Puts are stamped by, Unix ns.
func (t *keyTable) stats(now int64) (pending int, waiting int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policy == KeyDedup {
		t.expireLocked(now) // what expired since the last Put
	}
	for _, q := range t.waiting {
		waiting += len(q)
	}
	if t.policy != KeySerial {
		pending = t.ix.live
	}
	return pending + len(t.held), waiting
}
