package godq

import (
	"context"
	"fmt"
	"sync/atomic"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/channel"
)

// ChannelBackend adapts a github.com/nsqio/go-diskqueue queue as a
// [channel.Backend], for comparison and for services moving over from it.
//
// Its guarantees are go-diskqueue's, weaker than spillq's: a record counts
// as acknowledged as soon as it is read from ReadChan, so messages in
// flight when the process crashes are lost rather than delivered again;
// Put ignores its context; and records carry no checksum.
func ChannelBackend(dq godiskqueue.Interface) channel.Backend {
	return &goDiskQueue{dq: dq}
}

type goDiskQueue struct {
	dq  godiskqueue.Interface
	seq atomic.Uint64 // local numbering of records read; go-diskqueue has none
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
		return g.seq.Add(1), b, nil
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
}

// Ack is a no-op: go-diskqueue removed the record when Read took it.
func (g *goDiskQueue) Ack(uint64) error { return nil }

func (g *goDiskQueue) Depth() int64 { return g.dq.Depth() }
func (g *goDiskQueue) Empty() error { return g.dq.Empty() }
func (g *goDiskQueue) Close() error { return g.dq.Close() }
