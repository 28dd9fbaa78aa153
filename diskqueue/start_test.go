package diskqueue

import (
	"context"
	"testing"
)

// TestNewCursorMidSegmentAcks: a cursor created while the active segment
// already holds more records than one allocUnit of bitmap covers
// (4064*8 = 32512) got a bitmap createAckFile preallocates to one
// allocUnit (grow), and nothing grew it until the next Put's reserve:
// acknowledging a record past 32512 faulted on the mapped path. The same
// create path serves a bitmap Open takes for absent (an empty header after
// a power cut). ackFor now grows it to the records there.
func TestNewCursorMidSegmentAcks(t *testing.T) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	l, err := OpenLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 33000 {
		if err := l.Put(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.Cursor("n", FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		rec, err := c.Read(done)
		if err != nil {
			break
		}
		if err := c.Ack(rec.Seq); err != nil {
			t.Fatalf("ack %d: %v", rec.Seq, err)
		}
		n++
	}
	if n != 33000 {
		t.Errorf("delivered %d, want 33000", n)
	}
}
