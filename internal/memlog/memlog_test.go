package memlog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/memlog"
)

var (
	_ channel.Log    = (*memlog.Log)(nil)
	_ channel.Cursor = (*memlog.Cursor)(nil)
)

// TestReopen: a restart hands out again what was read and not
// acknowledged, and keeps the acknowledgements out of order.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	l := memlog.NewLog()
	c := l.Cursor("")
	for _, b := range []string{"a", "b", "c"} {
		if err := l.Put(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	var recs [3]diskqueue.Record
	if n, err := c.ReadBatch(ctx, recs[:]); n != 3 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	if err := c.Ack(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(1); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Fatalf("second Ack: %v", err)
	}
	l.Close()
	if _, err := c.ReadBatch(ctx, recs[:]); !errors.Is(err, diskqueue.ErrClosed) {
		t.Fatalf("ReadBatch after Close: %v", err)
	}
	l = l.Reopen()
	c = l.Cursor("")
	n, err := c.ReadBatch(ctx, recs[:])
	if err != nil || n != 2 || recs[0].Seq != 0 || recs[1].Seq != 2 {
		t.Fatalf("after Reopen: %d %v %v", n, recs[:n], err)
	}
	if d := c.Depth(); d != 2 {
		t.Fatalf("Depth = %d, want 2", d)
	}
}
