package diskqueue_test

import (
	"context"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestLogAcknowledgedByAll: Log.Acknowledged is true only for a record
// every cursor acknowledged (vacuously without cursors), and Log.Floor is
// the lowest cursor's read position.
func TestLogAcknowledgedByAll(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{})
	defer l.Close()
	ctx := context.Background()
	for range 4 {
		if err := l.Put(ctx, []byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	if !l.Acknowledged(0) || l.Acknowledged(4) || l.Floor() != 4 {
		t.Fatalf("no cursor: Acknowledged(0)=%v Acknowledged(4)=%v Floor=%d; want true, false, 4", l.Acknowledged(0), l.Acknowledged(4), l.Floor())
	}
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	read := func(c *diskqueue.Cursor) uint64 {
		t.Helper()
		rec, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Seq
	}
	for range 2 {
		read(a)
	}
	if err := a.Ack(1); err != nil { // out of order: 0 stays
		t.Fatal(err)
	}
	read(b)
	if err := b.Ack(read(b)); err != nil {
		t.Fatal(err)
	}
	if !l.Acknowledged(1) || l.Acknowledged(0) || l.Acknowledged(2) {
		t.Fatalf("Acknowledged(0,1,2) = %v %v %v; want false, true, false", l.Acknowledged(0), l.Acknowledged(1), l.Acknowledged(2))
	}
	if l.Floor() != 0 {
		t.Fatalf("Floor = %d; a has not acknowledged 0", l.Floor())
	}
	if err := a.Ack(0); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(0); err != nil {
		t.Fatal(err)
	}
	if !l.Acknowledged(0) || l.Floor() != 2 {
		t.Fatalf("after both acknowledged 0 and 1: Acknowledged(0)=%v Floor=%d; want true, 2", l.Acknowledged(0), l.Floor())
	}
}
