package channel

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
	// deferred included. Put returns [ErrDuplicate], or nil with
	// Options.DuplicatesOK; either way the message is dropped and counted
	// in Stats.Duplicates. The job-queue "unique job".
	KeyUnique
	// KeyReplace is "latest wins": a Put supersedes the pending message
	// with the same key, which is never delivered (it is acknowledged and
	// counted in Stats.Superseded when the channel reaches it); consumers
	// see only the newest version. A superseded message already in flight
	// finishes normally.
	KeyReplace
	// KeyDedup drops a Put whose key was put within Options.DedupWindow,
	// pending or not (idempotent producers): Put returns [ErrDuplicate], or
	// nil with Options.DuplicatesOK, and counts it in Stats.Duplicates.
	KeyDedup
	// KeySerial delivers at most one message per key at a time: a message
	// whose key has one in flight (or requeued, or timed out and waiting
	// to be delivered again) waits behind it, in put order, while messages
	// of other keys flow past. Order per key is put order, retries and
	// graceful restarts included: at Close a keyed message read from the
	// backend stays where it is there (its attempts since it was stored
	// are then not counted), except that messages held in the memory
	// buffer (Options.MemQueueSize) go to the backend behind the others,
	// and that on a topic's channel what it held in memory or deferred goes
	// to its timer store and comes first. Nothing of it is kept across a
	// restart: the next run holds no key.
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

	mu sync.Mutex
	// entries is the state per key: under KeyUnique its pending message,
	// under KeyReplace its newest, under KeyDedup when it was last put,
	// under KeySerial the message being worked on.
	entries map[string]keyEntry
	// seenQ holds KeyDedup's puts in order, for expiry.
	seenQ []seenKey
	// waiting holds, per key, the messages behind its held one
	// (KeySerial), in put order.
	waiting map[string][]*Message

	duplicates, superseded atomic.Int64
}

// keyEntry is one key's state.
type keyEntry struct {
	// id is, under KeyReplace, the newest version whose Put succeeded
	// (0 while none has): a version still being put supersedes nothing,
	// since its Put may yet fail. Under the other policies it is the
	// message the entry is for.
	id ID
	// seq is the backend record of message id, once known (hasSeq): what
	// a restart checks the entry against.
	seq    uint64
	hasSeq bool
	// n counts, under KeyReplace, the versions put and not yet done, so
	// the entry outlives every older version it supersedes; -1 when
	// restored (unknown: the entry then goes once the backend's floor has
	// passed seq, see snapshot).
	n  int
	at int64 // KeyDedup: Unix ns of the put
}

type seenKey struct {
	at  int64
	key string
}

func newKeyTable(policy KeyPolicy, window time.Duration) *keyTable {
	t := &keyTable{policy: policy, window: int64(window), entries: map[string]keyEntry{}}
	if policy == KeySerial {
		t.waiting = map[string][]*Message{}
	}
	return t
}

// admitted is what admit changed, for undo.
type admitted struct {
	k    string
	id   ID
	prev keyEntry
	had  bool
	set  bool // admit changed an entry
}

// admit decides a Put of a message with key and id at now (Unix ns): it
// returns ErrDuplicate for one the policy refuses, and otherwise records it
// and returns what undo takes back if the Put then fails.
func (t *keyTable) admit(key []byte, id ID, now int64) (admitted, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, had := t.entries[string(key)]
	var ne keyEntry
	switch t.policy {
	case KeyUnique:
		if had {
			t.duplicates.Add(1)
			return admitted{}, fmt.Errorf("%w: key %q has a message pending", ErrDuplicate, key)
		}
		ne = keyEntry{id: id}
	case KeyReplace:
		ne = e // the newest stored version stays the one that supersedes
		switch {
		case !had:
			ne.n = 1
		case e.n >= 0:
			ne.n++
		}
	case KeyDedup:
		t.expireLocked(now)
		if had && now-e.at < t.window {
			t.duplicates.Add(1)
			return admitted{}, fmt.Errorf("%w: key %q was put %v ago, within the dedup window", ErrDuplicate, key, time.Duration(now-e.at).Round(time.Millisecond))
		}
		ne = keyEntry{id: id, at: now}
	default:
		return admitted{}, nil
	}
	k := string(key)
	t.entries[k] = ne
	if t.policy == KeyDedup {
		t.seenQ = append(t.seenQ, seenKey{now, k})
	}
	return admitted{k: k, id: id, prev: e, had: had, set: true}, nil
}

// undo takes back what admit did for a Put that then failed.
func (t *keyTable) undo(a admitted) {
	if !a.set {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policy == KeyReplace {
		cur, ok := t.entries[a.k]
		if !ok || cur.n <= 0 {
			return // restored (versions not counted), or gone
		}
		if cur.n--; cur.n == 0 {
			delete(t.entries, a.k)
		} else {
			t.entries[a.k] = cur
		}
		return
	}
	if cur, ok := t.entries[a.k]; ok && cur.id == a.id {
		if a.had {
			t.entries[a.k] = a.prev
		} else {
			delete(t.entries, a.k)
		}
	}
}

// commit records that the Put of message id with key succeeded, in
// backend record seq if hasSeq: under KeyReplace it is now the version
// that supersedes the older ones.
func (t *keyTable) commit(key []byte, id ID, seq uint64, hasSeq bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[string(key)]
	if !ok {
		return
	}
	if t.policy == KeyReplace && id > e.id {
		e.id, e.seq, e.hasSeq = id, 0, false
	}
	if e.id == id && hasSeq {
		e.seq, e.hasSeq = seq, true
	}
	t.entries[string(key)] = e
}

// stored records the backend record that message id with key went to
// later (Close stores again what it held), so a snapshot can name it.
func (t *keyTable) stored(key []byte, id ID, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.entries[string(key)]; ok && e.id == id {
		e.seq, e.hasSeq = seq, true
		t.entries[string(key)] = e
	}
}

// expireLocked forgets the keys put before the dedup window.
func (t *keyTable) expireLocked(now int64) {
	i := 0
	for i < len(t.seenQ) && now-t.seenQ[i].at >= t.window {
		e := t.seenQ[i]
		if cur, ok := t.entries[e.key]; ok && cur.at == e.at {
			delete(t.entries, e.key)
		}
		i++
	}
	if i > 0 {
		t.seenQ = append(t.seenQ[:0:0], t.seenQ[i:]...)
	}
}

// take decides whether m, taken for delivery, may go out now: false under
// KeyReplace for a superseded message (drop it), and under KeySerial for
// one whose key another message holds (it was parked behind it).
func (t *keyTable) take(m *Message) (deliver, drop bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := string(m.Key)
	switch t.policy {
	case KeyReplace:
		// Newer, not merely other: a version taken before its own Put
		// has committed is the newest.
		if e, ok := t.entries[k]; ok && e.id > m.ID {
			t.superseded.Add(1)
			return false, true
		}
	case KeySerial:
		if e, ok := t.entries[k]; ok && e.id != m.ID {
			t.waiting[k] = append(t.waiting[k], m)
			return false, false
		}
		t.entries[k] = keyEntry{id: m.ID}
	}
	return true, false
}

// done records that the message id with key will not be delivered again:
// finished, dead-lettered, expired or superseded. Under KeySerial it
// returns the message now next for the key, if one waits.
func (t *keyTable) done(key string, id ID) *Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[key]
	if !ok {
		return nil
	}
	switch t.policy {
	case KeyUnique:
		if e.id == id {
			delete(t.entries, key)
		}
	case KeyReplace:
		// Any version: the entry goes with the last of them.
		if e.n > 0 {
			if e.n--; e.n == 0 {
				delete(t.entries, key)
			} else {
				t.entries[key] = e
			}
		}
	case KeySerial:
		if e.id != id {
			return nil
		}
		delete(t.entries, key)
		q := t.waiting[key]
		if len(q) == 0 {
			return nil
		}
		next := q[0]
		q[0] = nil
		if q = q[1:]; len(q) == 0 {
			delete(t.waiting, key)
		} else {
			t.waiting[key] = q
		}
		t.entries[key] = keyEntry{id: next.ID}
		return next
	}
	return nil
}

// empty forgets every pending message (Channel.Empty). The dedup window
// remembers puts, not messages, so it stays.
func (t *keyTable) empty() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policy != KeyDedup {
		clear(t.entries)
	}
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

// supersededBy reports whether, under KeyReplace, a newer message with
// key than id is stored.
func (t *keyTable) supersededBy(key []byte, id ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[string(key)]
	return ok && e.hasSeq && e.id > id
}

// stats is the table's part of Stats.
func (t *keyTable) stats() (pending int, waiting int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range t.waiting {
		waiting += len(q)
	}
	return len(t.entries), waiting
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
// below floor, the backend's oldest record not acknowledged. Entries
// of messages that never reached the backend are left out: a crash loses
// those messages, and a graceful Close stores the ones still held first
// (so under KeyDedup a key whose message went through memory alone and
// was finished is not remembered across a restart).
func (t *keyTable) snapshot(floor uint64) []KeyEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []KeyEntry
	for k, e := range t.entries {
		switch t.policy {
		case KeyUnique, KeyReplace:
			if t.policy == KeyReplace && e.n < 0 && e.hasSeq && e.seq < floor {
				// Restored, its versions not counted: the newest is
				// acknowledged, and so is every older one (all in the
				// backend, a restart holding none elsewhere: under
				// KeyReplace a keyed message never moves to the timer
				// store).
				delete(t.entries, k)
				continue
			}
			if !e.hasSeq {
				continue
			}
			out = append(out, KeyEntry{Key: k, ID: e.id, Seq: e.seq})
		case KeyDedup:
			// Only keys whose message reached the backend: after a crash
			// one held in memory only is lost, and the producer's retry
			// must then be let in, not refused as a duplicate.
			if e.hasSeq {
				out = append(out, KeyEntry{Key: k, ID: e.id, Seq: e.seq, At: time.Unix(0, e.at)})
			}
		}
	}
	return out
}

// restore loads a KeyState: restored KeyReplace entries count their
// versions as unknown (see keyEntry.n).
func (t *keyTable) restore(st *KeyState, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range st.Entries {
		k := e.Key
		switch t.policy {
		case KeyUnique:
			t.entries[k] = keyEntry{id: e.ID, seq: e.Seq, hasSeq: true}
		case KeyReplace:
			t.entries[k] = keyEntry{id: e.ID, seq: e.Seq, hasSeq: true, n: -1}
		case KeyDedup:
			at := e.At.UnixNano()
			if now-at >= t.window {
				continue
			}
			if cur, ok := t.entries[k]; ok && cur.at >= at {
				continue
			}
			t.entries[k] = keyEntry{id: e.ID, seq: e.Seq, hasSeq: true, at: at}
			t.seenQ = append(t.seenQ, seenKey{at, k})
		}
	}
	slices.SortFunc(t.seenQ, func(a, b seenKey) int { return cmp.Compare(a.at, b.at) })
}
