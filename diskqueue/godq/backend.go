package godq

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"sync"

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
// go-diskqueue does not number its records, and looks none up: PutSeq,
// ReadAt, Scan, Sync, Unread and Unacknowledged return errors wrapping
// [errors.ErrUnsupported], and [channel.New] refuses, with
// [channel.ErrInvalidOptions], the options that need them: the key
// policies KeyUnique, KeyReplace and KeyDedup, Deliveries, and the adapter
// as a timer store. Replay returns [channel.ErrNoReplay].
func ChannelBackend(dq godiskqueue.Interface) channel.Store {
	g := &goDiskQueue{dq: dq, unacked: map[uint64][]byte{}}
	return channel.Store{Log: g, Cursor: g, Close: g.Close}
}

// errUnsupported says what go-diskqueue cannot do.
func errUnsupported(what string) error {
	return fmt.Errorf("godq: go-diskqueue has no %s: %w", what, errors.ErrUnsupported)
}

type goDiskQueue struct {
	dq godiskqueue.Interface

	// mu guards the fields below.
	mu sync.Mutex
	// lastSeq numbers the records read: go-diskqueue has no sequence
	// numbers of its own.
	lastSeq uint64
	// unacked holds the records read and not acknowledged, by seq: dq no
	// longer has them.
	unacked map[uint64][]byte
}

func (g *goDiskQueue) Put(_ context.Context, body []byte) error {
	if err := g.dq.Put(body); err != nil {
		return fmt.Errorf("godq: go-diskqueue put: %w", err)
	}
	return nil
}

// ReadBatch waits for a record, then takes those ready after it, up to
// len(dst), numbering them as it reads them (from 1, each run).
func (g *goDiskQueue) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	var b []byte
	select {
	case body, ok := <-g.dq.ReadChan():
		if !ok {
			return 0, channel.ErrClosed
		}
		b = body
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for {
		g.lastSeq++
		g.unacked[g.lastSeq] = b
		dst[n] = diskqueue.Record{Seq: g.lastSeq, Body: b}
		n++
		if n == len(dst) {
			return n, nil
		}
		select {
		case body, ok := <-g.dq.ReadChan():
			if !ok {
				return n, nil
			}
			b = body
		default:
			return n, nil
		}
	}
}

// Ack forgets a record read: go-diskqueue removed it when Read took it.
func (g *goDiskQueue) Ack(seq uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.unacked[seq]; !ok {
		return fmt.Errorf("%w: go-diskqueue record %d", channel.ErrNotInFlight, seq)
	}
	delete(g.unacked, seq)
	return nil
}

// Depth counts the records in dq and those read and not acknowledged.
func (g *goDiskQueue) Depth() int64 {
	g.mu.Lock()
	n := len(g.unacked)
	g.mu.Unlock()
	return g.dq.Depth() + int64(n)
}

func (g *goDiskQueue) Empty() error {
	err := g.dq.Empty()
	g.mu.Lock()
	clear(g.unacked)
	g.mu.Unlock()
	return err
}

// Acknowledged reports whether seq, a record read this run, was
// acknowledged.
func (g *goDiskQueue) Acknowledged(seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, unacked := g.unacked[seq]
	return seq != 0 && seq <= g.lastSeq && !unacked
}

// Floor is the oldest record read and not acknowledged, or the seq the
// next read gets.
func (g *goDiskQueue) Floor() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	floor := g.lastSeq + 1
	for seq := range g.unacked {
		floor = min(floor, seq)
	}
	return floor
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

// NextSeq is 0: go-diskqueue does not number what it stores.
func (g *goDiskQueue) NextSeq() uint64 { return 0 }

// MaxRecordBytes and MinRecordBytes say nothing of go-diskqueue's own
// limits, which its Put enforces.
func (g *goDiskQueue) MaxRecordBytes() int { return math.MaxInt }
func (g *goDiskQueue) MinRecordBytes() int { return 0 }

// Passed is 0: go-diskqueue reports no record it passes over.
func (g *goDiskQueue) Passed() int64 { return 0 }

// Discarded is false: only Empty discards, and the channel counts that.
func (g *goDiskQueue) Discarded(uint64) bool { return false }

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

func (g *goDiskQueue) Unread([]diskqueue.Record) error { return errUnsupported("unread") }

// Close puts the records read and not acknowledged back into dq, oldest
// first, then closes it.
func (g *goDiskQueue) Close() error {
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
