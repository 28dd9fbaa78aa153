package channel_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// TestPutRefusesWhatTheBackendCannotKeep: with room in memory, a body too
// large for the backend's records is refused at Put, not accepted into
// memory and lost at Close. The largest body that is accepted survives
// Close even after a Requeue with a delay has grown its envelope.
func TestPutRefusesWhatTheBackendCannotKeep(t *testing.T) {
	const maxRecord = 200
	const maxBody = maxRecord - channel.MaxEnvelopeOverhead
	b := newMemStore()
	c := newChannel(t, channel.Options{MemQueueSize: 10, Backend: limitedBackend{b, 0, maxRecord}.store()})
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), maxBody+1)
	err := c.PutWith(ctx, big, channel.PutOptions{Expires: time.Now().Add(time.Hour)})
	if !errors.Is(err, channel.ErrTooLarge) {
		t.Fatalf("Put of a %d-byte body over a %d-byte record limit: got %v, want ErrTooLarge", len(big), maxRecord, err)
	}
	if !strings.Contains(err.Error(), "body of 165 bytes") {
		t.Fatalf("error %q does not report the body's size", err)
	}
	if st := c.Stats(); st.Puts != 0 || st.MemoryDepth != 0 {
		t.Fatalf("a refused Put was kept or counted: %+v", st)
	}
	fits := bytes.Repeat([]byte("y"), maxBody)
	if err := c.PutWith(ctx, fits, channel.PutOptions{Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatalf("Put of a %d-byte body: %v", maxBody, err)
	}
	m := receive(t, c)
	if err := m.Requeue(time.Hour); err != nil { // adds a due time to the envelope
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close could not keep an accepted message: %v", err)
	}
	if d := b.Depth(); d != 1 {
		t.Fatalf("backend holds %d records after Close, want 1", d)
	}
}

func TestBackendLimitTooSmallForAnEnvelope(t *testing.T) {
	_, err := channel.New(channel.Options{Backend: limitedBackend{newMemStore(), 0, channel.MaxEnvelopeOverhead - 1}.store()})
	if !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("New over a backend whose records cannot hold an envelope: got %v, want ErrInvalidOptions", err)
	}
}

// TestPutRefusesTooSmall: a backend's smallest record bounds the body
// from below, less the fixed envelope header, on the memory path too.
func TestPutRefusesTooSmall(t *testing.T) {
	const minBody = 10
	b := newMemStore()
	c := newChannel(t, channel.Options{MemQueueSize: 10, Backend: limitedBackend{b, minBody + channel.MinEnvelopeOverhead, 1000}.store()})
	ctx := context.Background()
	err := c.Put(ctx, make([]byte, minBody-1))
	if !errors.Is(err, channel.ErrTooSmall) || !strings.Contains(err.Error(), "body of 9 bytes, minimum 10") {
		t.Fatalf("Put of %d bytes over a backend whose bodies start at %d: got %v, want ErrTooSmall with both sizes", minBody-1, minBody, err)
	}
	if err := c.Put(ctx, make([]byte, minBody)); err != nil {
		t.Fatalf("Put of exactly the minimum: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close could not keep an accepted message: %v", err)
	}
	if d := b.Depth(); d != 1 {
		t.Fatalf("backend holds %d records after Close, want 1", d)
	}
}
