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
	b := newMemBackend()
	c := newChannel(t, channel.Options{MemQueueSize: 10, Backend: limitedBackend{b, maxRecord}})
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
	_, err := channel.New(channel.Options{Backend: limitedBackend{newMemBackend(), channel.MaxEnvelopeOverhead - 1}})
	if !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("New over a backend whose records cannot hold an envelope: got %v, want ErrInvalidOptions", err)
	}
}
