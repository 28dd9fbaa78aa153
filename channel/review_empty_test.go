package channel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

type failingEmptyBackend struct{ *stallingBackend }

func (b failingEmptyBackend) Empty() error { return errors.New("disk I/O error") }

// An Empty whose backend Empty fails has raised emptiedBelow all the same:
// the records it did not discard are skipped by the pump, not delivered
// and not counted off, so Depth counts them for ever and nothing receives
// them until a restart.
func TestReviewFailedEmptyHidesRecords(t *testing.T) {
	b := failingEmptyBackend{&stallingBackend{memBackend: newMemBackend(), took: make(chan struct{}), release: make(chan struct{})}}
	b.stall.Store(true)
	c := newChannel(t, channel.Options{Backend: b})
	defer c.Close()
	put(t, c, "a", "b")
	<-b.took
	if err := c.Empty(); err == nil {
		t.Fatal("Empty did not fail")
	}
	close(b.release)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("after a failed Empty, Depth %d, backend still holds %d records, Receive: %v", c.Depth(), b.Depth(), err)
	}
	m.Finish()
}
