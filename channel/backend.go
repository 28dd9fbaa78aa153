package channel

import (
	"context"
	"fmt"
	"sync/atomic"

	godiskqueue "github.com/nsqio/go-diskqueue"
)

// Backend is the disk tier a Channel spills to. spillq's disk queue
// satisfies it through spillq.Open; [GoDiskQueue] adapts nsqd's.
//
// Read hands out records in order; a record stays in the backend until
// Ack, so one read but never acknowledged (the process crashed while it
// was in flight) is read again after a restart.
type Backend interface {
	// Put stores body; it must not keep body after it returns. It may
	// block, honouring ctx.
	Put(ctx context.Context, body []byte) error
	// Read returns the next record and its sequence number, waiting until
	// there is one, ctx ends or the backend closes.
	Read(ctx context.Context) (seq uint64, body []byte, err error)
	// Ack removes a record returned by Read. Acks may come in any order.
	Ack(seq uint64) error
	// Depth is how many records are stored and not acknowledged.
	Depth() int64
	// Empty discards every record.
	Empty() error
	// Close flushes and releases the backend.
	Close() error
}

// RecordLimiter is implemented by backends that refuse records over a
// size, such as spillq's disk queue. [New] reads the limit once, and Put
// refuses with [ErrTooLarge] any body that would not fit in a record once
// in its envelope, rather than accept it into memory and fail to keep it
// at Close.
type RecordLimiter interface {
	// MaxRecordBytes is the largest record Put accepts.
	MaxRecordBytes() int
}

// Replayer is implemented by backends that keep acknowledged records for
// replay, such as spillq's disk queue with retention.
type Replayer interface {
	// Replay yields the stored bodies of records with from <= seq < to.
	Replay(from, to uint64) func(yield func(body []byte, err error) bool)
}

// GoDiskQueue adapts a github.com/nsqio/go-diskqueue queue as a Backend,
// for comparison and for services moving over from it.
//
// Its guarantees are go-diskqueue's, weaker than spillq's: a record counts
// as acknowledged as soon as it is read from ReadChan, so messages in
// flight when the process crashes are lost rather than delivered again;
// Put ignores its context; and records carry no checksum.
func GoDiskQueue(dq godiskqueue.Interface) Backend {
	return &goDiskQueue{dq: dq}
}

type goDiskQueue struct {
	dq  godiskqueue.Interface
	seq atomic.Uint64 // local numbering of records read; go-diskqueue has none
}

func (g *goDiskQueue) Put(_ context.Context, body []byte) error {
	if err := g.dq.Put(body); err != nil {
		return fmt.Errorf("channel: go-diskqueue put: %w", err)
	}
	return nil
}

func (g *goDiskQueue) Read(ctx context.Context) (uint64, []byte, error) {
	select {
	case b, ok := <-g.dq.ReadChan():
		if !ok {
			return 0, nil, ErrClosed
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
