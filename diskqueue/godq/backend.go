package godq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// ChannelBackend adapts a github.com/nsqio/go-diskqueue queue as a
// channel's Backend (a [channel.Store]: the adapter is its Log and its
// Cursor), for comparison and for services moving over from it. The
// channel takes ownership of dq.
//
// go-diskqueue forgets a record as soon as it is read from its ReadChan,
// while a channel reads ahead of its consumers and acknowledges a record
// only when its message is finished. So the adapter holds every record it
// has read and that is not yet acknowledged, and Close puts those back
// into dq before closing it: a graceful Close loses nothing. After the
// restart they come after the records that were behind them.
//
// The rest of its guarantees are go-diskqueue's, weaker than spillq's: a
// crash loses the records read and not yet acknowledged (messages in
// flight or read ahead) rather than delivering them again; Put ignores its
// context; and records carry no checksum.
//
// go-diskqueue does not number its records, and looks none up. The
// adapter numbers them for one run, in dq's order (the backlog found at
// ChannelBackend first, from 0), so reads, acknowledgements, Floor and
// NextSeq agree within a run; no seq outlives it. PutSeq, ReadAt, Scan,
// Sync and Unacknowledged return errors wrapping
// [errors.ErrUnsupported], and [channel.New] refuses, with
// [channel.ErrInvalidOptions], the options that need them: the key
// policies KeyUnique, KeyReplace and KeyDedup, Deliveries, and the adapter
// as a timer store. Replay returns [channel.ErrNoReplay].
func ChannelBackend(dq godiskqueue.Interface) channel.Store {
	g := &goDiskQueue{dq: dq, unacked: map[uint64][]byte{}, closed: make(chan struct{}), wake: make(chan struct{}), reading: make(chan struct{}, 1)}
	// The records dq holds come first, in order: the reader's first is 0.
	g.nextSeq.Store(uint64(max(dq.Depth(), 0)))
	return channel.Store{Log: g, Cursor: g, Close: g.Close}
}

// errUnsupported says what go-diskqueue cannot do.
func errUnsupported(what string) error {
	return fmt.Errorf("godq: go-diskqueue has no %s: %w", what, errors.ErrUnsupported)
}

type goDiskQueue struct {
	dq godiskqueue.Interface

	// putMu orders the Puts, so that the seq each takes is its record's
	// place in dq. nextSeq is raised before dq.Put (and lowered again if
	// it fails), so a reader never numbers a record past it.
	putMu   sync.Mutex
	nextSeq atomic.Uint64

	reading   chan struct{} // a token: held by the reader taking from dq
	closed    chan struct{} // closed by Close: waiting reads return ErrClosed
	closeOnce sync.Once

	// mu guards the fields below.
	mu sync.Mutex
	// readSeq is the seq of the next record read from dq: records are
	// read in the order they were put.
	readSeq uint64
	// epoch counts Empty calls: a record a reader took from dq before an
	// Empty and numbers after it was emptied, and is dropped.
	epoch uint64
	// unacked holds the records read and not acknowledged, by seq: dq no
	// longer has them.
	unacked map[uint64][]byte
	// back holds the records Unread gave back, in seq order, for the next
	// ReadBatch; wake is closed (and replaced) by Unread, for a ReadBatch
	// waiting on dq.
	back []diskqueue.Record
	wake chan struct{}
}

// Put stores body in dq. go-diskqueue takes no context: Put waits for it.
func (g *goDiskQueue) Put(_ context.Context, body []byte) error {
	g.putMu.Lock()
	defer g.putMu.Unlock()
	g.nextSeq.Add(1)
	if err := g.dq.Put(body); err != nil {
		g.nextSeq.Add(^uint64(0))
		return fmt.Errorf("godq: go-diskqueue put: %w", err)
	}
	return nil
}

// ReadBatch hands out what Unread gave back first; otherwise it waits
// for a record from dq, then takes those ready after it, up to len(dst),
// numbering them as it reads them.
func (g *goDiskQueue) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for {
		g.mu.Lock()
		if n := g.readBackLocked(dst); n > 0 {
			g.mu.Unlock()
			return n, nil
		}
		wake := g.wake
		g.mu.Unlock()
		// One reader at a time takes from dq and numbers what it took,
		// so that seqs follow dq's order.
		select {
		case g.reading <- struct{}{}:
		case <-wake:
			continue
		case <-g.closed:
			return 0, channel.ErrClosed
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		n, again, err := g.readDQ(ctx, dst, wake)
		<-g.reading
		if !again {
			return n, err
		}
	}
}

// readDQ is ReadBatch's wait on dq, for the holder of reading; again
// means look at what Unread gave back, or at dq once more.
func (g *goDiskQueue) readDQ(ctx context.Context, dst []diskqueue.Record, wake <-chan struct{}) (n int, again bool, err error) {
	g.mu.Lock()
	epoch := g.epoch
	g.mu.Unlock()
	select {
	case body, ok := <-g.dq.ReadChan():
		if !ok {
			return 0, false, channel.ErrClosed
		}
		if n := g.number(dst, body, epoch); n > 0 {
			return n, false, nil
		}
		return 0, true, nil
	case <-wake:
		return 0, true, nil
	case <-g.closed:
		return 0, false, channel.ErrClosed
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}

// number takes b, read from dq while the epoch was epoch, and those ready
// after it into dst, numbering them; 0 if an Empty since dropped b.
func (g *goDiskQueue) number(dst []diskqueue.Record, b []byte, epoch uint64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.epoch != epoch {
		return 0 // emptied while it was on its way
	}
	n := 0
	for {
		seq := g.readSeq
		g.readSeq++
		g.unacked[seq] = b
		dst[n] = diskqueue.Record{Seq: seq, Body: b}
		n++
		if n == len(dst) {
			return n
		}
		select {
		case body, ok := <-g.dq.ReadChan():
			if !ok {
				return n
			}
			b = body
		default:
			return n
		}
	}
}

// readBackLocked moves records Unread gave back, and not acknowledged
// since, into dst.
func (g *goDiskQueue) readBackLocked(dst []diskqueue.Record) int {
	n := 0
	for len(g.back) > 0 && n < len(dst) {
		r := g.back[0]
		g.back = g.back[1:]
		if _, ok := g.unacked[r.Seq]; ok {
			dst[n] = r
			n++
		}
	}
	return n
}

// Ack forgets a record read: go-diskqueue removed it when it was read.
func (g *goDiskQueue) Ack(seq uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.unacked[seq]; !ok {
		return fmt.Errorf("%w: go-diskqueue record %d", channel.ErrNotInFlight, seq)
	}
	delete(g.unacked, seq)
	return nil
}

// Depth is what dq holds and the records read and not acknowledged.
func (g *goDiskQueue) Depth() int64 {
	g.mu.Lock()
	n := len(g.unacked)
	g.mu.Unlock()
	return g.dq.Depth() + int64(n)
}

// Empty discards what dq holds and the records read and not acknowledged.
func (g *goDiskQueue) Empty() error {
	g.putMu.Lock() // no Put numbered meanwhile
	defer g.putMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.dq.Empty()
	clear(g.unacked)
	g.back = nil
	g.epoch++
	g.readSeq = g.nextSeq.Load()
	return err
}

// Acknowledged reports whether seq was read and acknowledged (or emptied).
func (g *goDiskQueue) Acknowledged(seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, unacked := g.unacked[seq]
	return seq < g.readSeq && !unacked
}

// Discarded reports whether seq, read and not acknowledged by its reader,
// was discarded since by Empty.
func (g *goDiskQueue) Discarded(seq uint64) bool { return g.Acknowledged(seq) }

// Floor is the oldest record not acknowledged: the oldest read and held,
// or the next to read.
func (g *goDiskQueue) Floor() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	floor := g.readSeq
	for seq := range g.unacked {
		floor = min(floor, seq)
	}
	return floor
}

// Unread gives back records read and not acknowledged, for the next
// ReadBatch to hand out first, in seq order.
func (g *goDiskQueue) Unread(recs []diskqueue.Record) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range recs {
		if r.Seq >= g.readSeq {
			return fmt.Errorf("%w: unread of go-diskqueue record %d, not handed out", channel.ErrNotInFlight, r.Seq)
		}
	}
	for _, r := range recs {
		if _, ok := g.unacked[r.Seq]; !ok {
			continue // acknowledged or emptied since
		}
		i, found := slices.BinarySearchFunc(g.back, r.Seq, func(b diskqueue.Record, seq uint64) int { return cmp.Compare(b.Seq, seq) })
		if !found {
			g.back = slices.Insert(g.back, i, r)
		}
	}
	close(g.wake)
	g.wake = make(chan struct{})
	return nil
}

// PutBatch puts bodies one at a time: go-diskqueue has no batch.
func (g *goDiskQueue) PutBatch(ctx context.Context, bodies [][]byte) (int, error) {
	for i, b := range bodies {
		if err := g.Put(ctx, b); err != nil {
			return i, err
		}
	}
	return len(bodies), nil
}

// NextSeq is the seq the next record put gets, this run.
func (g *goDiskQueue) NextSeq() uint64 { return g.nextSeq.Load() }

// MaxRecordBytes and MinRecordBytes say nothing of go-diskqueue's own
// limits, which its Put enforces.
func (g *goDiskQueue) MaxRecordBytes() int { return math.MaxInt }
func (g *goDiskQueue) MinRecordBytes() int { return 0 }

// Passed is 0: go-diskqueue reports no record it passes over.
func (g *goDiskQueue) Passed() int64 { return 0 }

func (g *goDiskQueue) PutSeq(context.Context, []byte) (uint64, error) {
	return 0, errUnsupported("sequence numbers")
}

func (g *goDiskQueue) ReadAt(uint64) (diskqueue.Record, error) {
	return diskqueue.Record{}, errUnsupported("lookup by sequence number")
}

func (g *goDiskQueue) Scan(uint64, uint64) iter.Seq2[diskqueue.Record, error] {
	return func(yield func(diskqueue.Record, error) bool) { yield(diskqueue.Record{}, errUnsupported("scan")) }
}

func (g *goDiskQueue) Unacknowledged(uint64, uint64) iter.Seq2[diskqueue.Record, error] {
	return g.Scan(0, 0)
}

func (g *goDiskQueue) Sync(context.Context) error { return errUnsupported("sync on demand") }

// Close puts the records read and not acknowledged back into dq, oldest
// first, then closes it.
func (g *goDiskQueue) Close() error {
	g.closeOnce.Do(func() { close(g.closed) })
	g.mu.Lock()
	seqs := make([]uint64, 0, len(g.unacked))
	for seq := range g.unacked {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	var errs []error
	for _, seq := range seqs {
		if err := g.dq.Put(g.unacked[seq]); err != nil {
			errs = append(errs, fmt.Errorf("godq: close: put back record %d: %w", seq, err))
			continue
		}
		delete(g.unacked, seq)
	}
	g.mu.Unlock()
	if err := g.dq.Close(); err != nil {
		errs = append(errs, fmt.Errorf("godq: close go-diskqueue: %w", err))
	}
	return errors.Join(errs...)
}
