package spillq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// deadStore is the dead-letter store's disk queue with Put durable on
// return and Acks in any order. A disk queue hands out seqs through Read,
// and acknowledges only what Read handed out; letters are acknowledged as
// they are redriven or purged, in any order. So Put learns its seq by
// counting (it is the queue's only writer, serialised by mu), and Ack
// first moves the read cursor past the record: each record is read once
// that way, the last time it is needed, which also makes the queue skip
// the damaged ones.
type deadStore struct {
	q        *diskqueue.Queue
	mu       sync.Mutex
	next     uint64 // the seq the next Put gets
	readNext uint64 // the seq after the last record Read handed out
}

func newDeadStore(q *diskqueue.Queue) *deadStore {
	st := q.Stats()
	return &deadStore{q: q, next: st.WriteSeq, readNext: st.ReadSeq}
}

// done is a context that has ended: Read with it does not wait.
var done = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Put stores body and returns once it is on stable storage. The store's
// own sync policy never waits (deadOptions): Put syncs outside the lock
// that orders Puts, so that concurrent dead letters share fsyncs.
func (t *deadStore) Put(ctx context.Context, body []byte) (uint64, error) {
	seq, err := t.put(ctx, body)
	if err != nil {
		return seq, err
	}
	if err := t.q.Sync(ctx); err != nil {
		if ctx.Err() != nil {
			// Stored, its fsync under way when ctx ended: as the log's
			// Put says so, ErrNotDurable.
			return seq, fmt.Errorf("spillq: dead-letter store: %w (%w)", channel.ErrNotDurable, err)
		}
		// Stored, maybe not durable (the fsync failed): the caller
		// keeps the message elsewhere, so this record goes.
		t.Ack(seq)
		return 0, err
	}
	return seq, nil
}

func (t *deadStore) put(ctx context.Context, body []byte) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seq := t.next
	err := t.q.Put(ctx, body)
	if errors.Is(err, diskqueue.ErrNotDurable) {
		t.next = seq + 1
		return seq, err
	}
	if err != nil {
		// Put may fail after storing the record otherwise (a failed
		// fsync). The caller keeps the message elsewhere, so such a
		// record is acknowledged, not to come back twice.
		if w := t.q.Stats().WriteSeq; w > seq {
			t.next = w
			for s := seq; s < w; s++ {
				t.ackLocked(s)
			}
		}
		return 0, err
	}
	t.next = seq + 1
	return seq, nil
}

// Ack acknowledges record seq, in any order.
func (t *deadStore) Ack(seq uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ackLocked(seq)
}

func (t *deadStore) ackLocked(seq uint64) error {
	for t.readNext <= seq {
		rec, err := t.q.Read(done)
		if err != nil {
			return fmt.Errorf("spillq: dead-letter store: reading up to seq %d: %w", seq, err)
		}
		t.readNext = rec.Seq + 1
	}
	return t.q.Ack(seq)
}

func (t *deadStore) Depth() int64 { return t.q.Depth() }

func (t *deadStore) Close() error { return t.q.Close() }
