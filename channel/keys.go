package channel

import (
	"fmt"
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
	// of other keys flow past. Order per key is put order, retries
	// included.
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
// after any in-flight shard and after Channel.mu, never before.
type keyTable struct {
	policy KeyPolicy
	window int64 // KeyDedup: ns

	mu sync.Mutex
	// pending counts, per key, the messages put and not done (KeyUnique).
	pending map[string]int
	// latest is, per key, the newest message put (KeyReplace).
	latest map[string]ID
	// seen is, per key, when it was last put (KeyDedup); seenQ holds the
	// same in put order, for expiry.
	seen  map[string]int64
	seenQ []seenKey
	// held is, per key, the message being worked on (KeySerial); waiting
	// holds the messages of that key behind it, in put order.
	held    map[string]ID
	waiting map[string][]*Message

	duplicates, superseded atomic.Int64
}

type seenKey struct {
	at  int64
	key string
}

func newKeyTable(policy KeyPolicy, window time.Duration) *keyTable {
	t := &keyTable{policy: policy, window: int64(window)}
	switch policy {
	case KeyUnique:
		t.pending = map[string]int{}
	case KeyReplace:
		t.latest = map[string]ID{}
	case KeyDedup:
		t.seen = map[string]int64{}
	case KeySerial:
		t.held, t.waiting = map[string]ID{}, map[string][]*Message{}
	}
	return t
}

// admit decides a Put of a message with key and id at now (Unix ns): it
// returns ErrDuplicate for one the policy refuses, and otherwise records it
// and returns the function that takes it back if the Put then fails.
func (t *keyTable) admit(key []byte, id ID, now int64) (undo func(), err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.policy {
	case KeyUnique:
		if t.pending[string(key)] > 0 {
			t.duplicates.Add(1)
			return nil, fmt.Errorf("%w: key %q has a message pending", ErrDuplicate, key)
		}
		k := string(key)
		t.pending[k]++
		return func() { t.done(k, id) }, nil
	case KeyReplace:
		k := string(key)
		prev, had := t.latest[k]
		t.latest[k] = id
		return func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.latest[k] == id {
				if had {
					t.latest[k] = prev
				} else {
					delete(t.latest, k)
				}
			}
		}, nil
	case KeyDedup:
		t.expireLocked(now)
		if at, ok := t.seen[string(key)]; ok && now-at < t.window {
			t.duplicates.Add(1)
			return nil, fmt.Errorf("%w: key %q was put %v ago, within the dedup window", ErrDuplicate, key, time.Duration(now-at).Round(time.Millisecond))
		}
		k := string(key)
		prevAt, had := t.seen[k]
		t.seen[k] = now
		t.seenQ = append(t.seenQ, seenKey{now, k})
		return func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.seen[k] == now {
				if had {
					t.seen[k] = prevAt
				} else {
					delete(t.seen, k)
				}
			}
		}, nil
	}
	return func() {}, nil
}

// expireLocked forgets the keys put before the dedup window.
func (t *keyTable) expireLocked(now int64) {
	i := 0
	for i < len(t.seenQ) && now-t.seenQ[i].at >= t.window {
		e := t.seenQ[i]
		if t.seen[e.key] == e.at {
			delete(t.seen, e.key)
		}
		i++
	}
	if i > 0 {
		t.seenQ = append(t.seenQ[:0:0], t.seenQ[i:]...)
	}
}

// superseded reports whether m, about to be delivered, has been replaced
// by a newer message with its key (KeyReplace).
func (t *keyTable) supersededLocked(m *Message) bool {
	id, ok := t.latest[string(m.Key)]
	return ok && id != m.ID
}

// take decides whether m, taken for delivery, may go out now: false under
// KeyReplace for a superseded message (drop it), and under KeySerial for
// one whose key another message holds (it was parked behind it).
func (t *keyTable) take(m *Message) (deliver, drop bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.policy {
	case KeyReplace:
		if t.supersededLocked(m) {
			t.superseded.Add(1)
			return false, true
		}
	case KeySerial:
		k := string(m.Key)
		if id, ok := t.held[k]; ok && id != m.ID {
			t.waiting[k] = append(t.waiting[k], m)
			return false, false
		}
		t.held[k] = m.ID
	}
	return true, false
}

// done records that the message id with key will not be delivered again:
// finished, dead-lettered, expired or superseded. Under KeySerial it
// returns the message now next for the key, if one waits.
func (t *keyTable) done(key string, id ID) *Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.policy {
	case KeyUnique:
		if n := t.pending[key] - 1; n > 0 {
			t.pending[key] = n
		} else {
			delete(t.pending, key)
		}
	case KeyReplace:
		if t.latest[key] == id {
			delete(t.latest, key)
		}
	case KeySerial:
		if t.held[key] != id {
			return nil
		}
		delete(t.held, key)
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
		t.held[key] = next.ID
		return next
	}
	return nil
}

// empty forgets every pending message (Channel.Empty). The dedup window
// remembers puts, not messages, so it stays.
func (t *keyTable) empty() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.pending)
	clear(t.latest)
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

// stats is the table's part of Stats.
func (t *keyTable) stats() (pending int, waiting int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.policy {
	case KeyUnique:
		pending = len(t.pending)
	case KeyReplace:
		pending = len(t.latest)
	case KeyDedup:
		pending = len(t.seen)
	case KeySerial:
		pending = len(t.held)
		for _, q := range t.waiting {
			waiting += len(q)
		}
	}
	return pending, waiting
}
