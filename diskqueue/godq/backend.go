package godq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/channel"
)

// ChannelBackend adapts a github.com/nsqio/go-diskqueue queue as a
// [channel.Backend], for comparison and for services moving over from it.
// The channel takes ownership of dq.
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
func ChannelBackend(dq godiskqueue.Interface) channel.Backend {
	return &goDiskQueue{dq: dq, unacked: map[uint64][]byte{}}
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

func (g *goDiskQueue) Read(ctx context.Context) (uint64, []byte, error) {
	select {
	case b, ok := <-g.dq.ReadChan():
		if !ok {
			return 0, nil, channel.ErrClosed
		}
		g.mu.Lock()
		g.lastSeq++
		seq := g.lastSeq
		g.unacked[seq] = b
		g.mu.Unlock()
		return seq, b, nil
	case <-ctx.Done():
		return 0, nil, ctx.Err()
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
