package spillq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TimersDir is the subdirectory of a queue's directory that holds its timer
// store: a disk queue of its own holding only the deferred messages
// (FORMAT.md, "Timer store").
const TimersDir = "timers"

// maxTimerSegmentBytes caps the timer store's segments: a message deferred
// for long keeps its segment, so they are smaller than the main log's.
const maxTimerSegmentBytes = 4 << 20

// timerOptions derives the timer store's options from the main log's
// (already defaulted by Open as far as record limits go).
func timerOptions(o diskqueue.Options) diskqueue.Options {
	seg := o.MaxSegmentBytes
	if seg == 0 || seg > maxTimerSegmentBytes {
		seg = maxTimerSegmentBytes
	}
	sync := o.SyncEvery
	if sync == 1 {
		// Put syncs itself, outside the lock that orders Puts, so that
		// concurrent deferrals share fsyncs (see diskTimers.Put).
		sync = math.MaxInt
	}
	// Everything else as the main log, so an option added later is not
	// dropped here. No BlockWhenFull: a deferral that finds the store
	// full stays in memory (and in the main log) rather than block a
	// Requeue. No retention: timers are not replayed. No hold unless
	// Open asks (a KeyDedup state is rebuilt from the timer store too).
	t := o
	t.MaxSegmentBytes, t.SyncEvery = seg, sync
	t.BlockWhenFull, t.RetainBytes, t.RetainAge, t.HoldAtOpen = false, 0, 0, false
	return t
}

// DiskTimers adapts a disk queue as a [channel.TimerStore], for a channel
// paired with a disk queue by hand ([DiskBackend]); [Open] makes one in
// the queue's [TimersDir]. The channel takes ownership of it: q must be
// used for nothing else, and must not have been read from.
func DiskTimers(q *diskqueue.Queue) channel.TimerStore { return newDiskTimers(q, false) }

// newDiskTimers adapts q; with syncEach, Put returns once its record is
// on stable storage (Open's timer store when Disk.SyncEvery is 1).
// Without, the store can Sync (syncingTimers), and the channel acknowledges
// the record a message was moved from only after a Sync that covers the new
// one; with, Put has made it durable, and the channel acknowledges at once.
func newDiskTimers(q *diskqueue.Queue, syncEach bool) channel.TimerStore {
	st := q.Stats()
	t := &diskTimers{q: q, syncEach: syncEach, next: st.WriteSeq, readNext: st.ReadSeq}
	if syncEach {
		return t
	}
	return syncingTimers{t}
}

// syncingTimers is a diskTimers whose Puts wait for no fsync, with the Sync
// the channel asks before it acknowledges a moved message's old record.
type syncingTimers struct{ *diskTimers }

// Sync makes the records put durable, for the channel to acknowledge the
// records of messages moved here (a Requeue with a delay, a deferred
// record the pump met) only after them: the two logs' pages reach the disk
// in no order a power cut respects.
func (t syncingTimers) Sync(ctx context.Context) error { return t.q.Sync(ctx) }

// diskTimers is a disk queue as a timer store. A disk queue hands out seqs
// through Read, and acknowledges only what Read handed out; a timer store
// reads in due order. So Put learns its seq by counting (it is the queue's
// only writer, serialised by mu), and Ack first moves the read cursor past
// the record: each record is read once that way, the last time it is
// needed, which also makes the queue skip the damaged ones.
type diskTimers struct {
	q        *diskqueue.Queue
	syncEach bool
	mu       sync.Mutex
	next     uint64 // the seq the next Put gets
	readNext uint64 // the seq after the last record Read handed out
}

// done is a context that has ended: Read with it does not wait.
var done = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (t *diskTimers) Put(ctx context.Context, body []byte) (uint64, error) {
	seq, err := t.put(ctx, body)
	if err != nil || !t.syncEach {
		return seq, err
	}
	if err := t.q.Sync(ctx); err != nil {
		if ctx.Err() != nil {
			// Stored, its fsync under way when ctx ended: as the log's
			// Put says so, ErrNotDurable. Acknowledged and reported as
			// failed, it was still read by a KeyDedup restart, whose
			// state then refused the producer's retry of a message that
			// was nowhere.
			return seq, fmt.Errorf("spillq: timer store: %w (%w)", channel.ErrNotDurable, err)
		}
		// Stored, maybe not durable (the fsync failed): the caller
		// keeps the message elsewhere, so this record goes.
		t.Ack(seq)
		return 0, err
	}
	return seq, nil
}

func (t *diskTimers) put(ctx context.Context, body []byte) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seq := t.next
	err := t.q.Put(ctx, body)
	if errors.Is(err, diskqueue.ErrNotDurable) {
		// Stored (a store opened with SyncEvery 1: its ctx ended while it
		// waited for the fsync): the channel keeps it as stored.
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

func (t *diskTimers) Get(seq uint64) ([]byte, error) {
	rec, err := t.q.ReadAt(seq)
	if errors.Is(err, diskqueue.ErrCorrupt) || errors.Is(err, diskqueue.ErrNotFound) {
		return nil, errors.Join(channel.ErrBadEnvelope, err)
	}
	return rec.Body, err
}

func (t *diskTimers) Ack(seq uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ackLocked(seq)
}

func (t *diskTimers) ackLocked(seq uint64) error {
	for t.readNext <= seq {
		rec, err := t.q.Read(done)
		if err != nil {
			return fmt.Errorf("spillq: timer store: reading up to seq %d: %w", seq, err)
		}
		t.readNext = rec.Seq + 1
	}
	return t.q.Ack(seq)
}

func (t *diskTimers) Records() func(yield func(uint64, []byte, error) bool) {
	return func(yield func(uint64, []byte, error) bool) {
		for rec, err := range t.q.Unacknowledged(0, math.MaxUint64) {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				continue // never readable; the queue sets it aside when read past
			}
			if !yield(rec.Seq, rec.Body, err) || err != nil {
				return
			}
		}
	}
}

func (t *diskTimers) Depth() int64 { return t.q.Depth() }

func (t *diskTimers) Empty() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.q.Empty()
	st := t.q.Stats()
	t.next, t.readNext = st.WriteSeq, st.ReadSeq
	return err
}

func (t *diskTimers) Close() error { return t.q.Close() }
