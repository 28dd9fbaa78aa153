package channel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoBackend is returned by [Channel.PutBack] on a channel with no
// store to put a message back in (no Backend, or a topic's channel with no
// timer store): the memory buffer alone would lose it in a crash.
var ErrNoBackend = errors.New("channel: no backend to put messages back in")

// PutBack stores messages that left the channel (dead letters an operator
// redrives) in it again, to be delivered from their first attempt: each
// keeps its ID, Key, Body and Timestamp (when it was first put; one with
// the zero Timestamp is stamped when stored); its Attempts, due time and
// expiry are not kept. It returns one error per
// message, nil once that message is stored and durable: stored, then made
// durable by the store's Sync (one for the whole batch), so a caller that
// deletes its own copy of a message only after a nil loses none in a crash
// or a power cut.
//
// A message is never put back in the memory buffer, whose content a crash
// loses: on a queue's channel it goes to the backend, behind what waits
// there, and a channel without a backend refuses it with ErrNoBackend. A
// topic's channel has no log of its own: the message goes to its timer
// store, due at once, for this channel alone (the topic's key policy,
// which decides at Put for all channels, is not asked).
//
// On a queue's channel the key policy decides as for a Put, with the
// message's own ID: under KeyUnique a message is refused with ErrDuplicate
// while another message with its key is pending; under KeyDedup it is
// refused only while another message put its key within the window (its
// own earlier Put does not count), and its key is remembered from now;
// under KeyReplace it is the version with its ID, superseded by any newer
// version of its key still pending. A refused message is not stored.
// PutBack counts each message stored as a Put in [Stats].
func (c *Channel) PutBack(ctx context.Context, msgs []*Message) []error {
	errs := make([]error, len(msgs))
	c.prod.putMu.RLock()
	defer c.prod.putMu.RUnlock()
	if c.isClosed.Load() {
		for i := range errs {
			errs[i] = ErrClosed
		}
		return errs
	}
	if c.backend == nil && (c.fan == nil || c.timers == nil) {
		for i := range errs {
			errs[i] = ErrNoBackend
		}
		return errs
	}
	someStored := false
	for i, in := range msgs {
		errs[i] = c.putBack(ctx, in)
		someStored = someStored || stored(errs[i])
	}
	if !someStored {
		return errs
	}
	// One sync for the batch: redrives are bulk work, an fsync each would
	// make a redrive of many thousands take minutes.
	log := c.backend
	if c.fan != nil {
		log = c.timers.store.log
	}
	synced, err := syncLog(context.WithoutCancel(ctx), log)
	if !synced && err == nil {
		return errs // a store that cannot sync: as its Puts said
	}
	if err != nil {
		err = fmt.Errorf("channel: put back: stored, not made durable: %w", err)
		for i := range errs {
			if stored(errs[i]) {
				errs[i] = err
			}
		}
		return errs
	}
	for i := range errs {
		if errors.Is(errs[i], ErrNotDurable) {
			errs[i] = nil // the Sync covered it
		}
	}
	return errs
}

// putBack stores one message of PutBack (putMu held shared).
func (c *Channel) putBack(ctx context.Context, in *Message) error {
	key := in.Key
	if len(key) == 0 {
		key = nil
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(key), MaxKeyBytes)
	}
	if err := checkBody(in.Body, key, c.minBody, c.maxBody); err != nil {
		return err
	}
	// Counted as a Put (Stats.Puts is nextID less the failures); the ID
	// taken is not used: the message keeps its own.
	c.prod.nextID.Add(1)
	m := Message{ID: in.ID, Body: in.Body, Key: key, Timestamp: in.Timestamp, ch: c, gen: c.gen.Load()}
	if c.fan != nil {
		bctx, release := c.bound(ctx)
		defer release()
		m.due = unixNano(time.Now())
		if _, err := c.putTimer(bctx, &m); !stored(err) {
			c.prod.putFailures.Add(1)
			return fmt.Errorf("channel: put back to the timer store: %w", err)
		} else if err != nil {
			return err
		}
		return nil
	}
	if key == nil || c.keys == nil || c.opts.Keys == KeySerial {
		_, err := c.putBackend(ctx, &m)
		return err
	}
	c.keys.forgetOwn(key, m.ID)
	adm, err := c.keys.admit(key, m.ID, c.stamp().UnixNano())
	if err != nil {
		c.prod.putFailures.Add(1)
		return err
	}
	_, err = c.putBackend(ctx, &m)
	if !stored(err) {
		c.keys.undo(m.ID, adm)
		return err
	}
	c.keys.commit(adm, m.ID, m.seq, m.src)
	return err
}

// forgetOwn removes, under KeyDedup, key's entry if it is message id's
// own: a message put back is not a duplicate of its own first Put.
func (t *keyTable) forgetOwn(key []byte, id ID) {
	if t.policy != KeyDedup {
		return
	}
	h := t.ix.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.ix.find(key, h); n >= 0 && t.ix.ents[n].id == id {
		t.removeEntry(n)
	}
}
