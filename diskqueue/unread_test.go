package diskqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// readRecs reads n records from c, failing the test if it cannot.
func readRecs(t *testing.T, c *diskqueue.Cursor, n int) []diskqueue.Record {
	t.Helper()
	out := make([]diskqueue.Record, 0, n)
	for len(out) < n {
		dst := make([]diskqueue.Record, n-len(out))
		k, err := c.ReadBatch(context.Background(), dst)
		if err != nil {
			t.Fatalf("ReadBatch after %d: %v", len(out), err)
		}
		out = append(out, dst[:k]...)
	}
	return out
}

func recSeqs(recs []diskqueue.Record) []uint64 {
	var s []uint64
	for _, r := range recs {
		s = append(s, r.Seq)
	}
	return s
}

func putBodies(t *testing.T, l *diskqueue.Log, n int) {
	t.Helper()
	for i := range n {
		if err := l.Put(context.Background(), body(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCursorFloor: Floor is the oldest record the cursor has not
// acknowledged, moving only when the records below it all are.
func TestCursorFloor(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{})
	defer l.Close()
	c := openCursor(t, l, "a", diskqueue.FromOldest())
	putBodies(t, l, 3)
	if f := c.Floor(); f != 0 {
		t.Fatalf("Floor before any ack = %d, want 0", f)
	}
	readRecs(t, c, 3)
	if err := c.Ack(1); err != nil {
		t.Fatal(err)
	}
	if f := c.Floor(); f != 0 {
		t.Fatalf("Floor with 0 not acknowledged = %d, want 0", f)
	}
	if err := c.Ack(0); err != nil {
		t.Fatal(err)
	}
	if f := c.Floor(); f != 2 {
		t.Fatalf("Floor after acks of 0 and 1 = %d, want 2", f)
	}
}

// TestCursorUnread: records given back come first, in seq order (two
// Unreads merged), then the records not read yet; a seq not handed out is
// refused, giving nothing back; records emptied meanwhile are not handed
// out again; Depth counts what was given back all along.
func TestCursorUnread(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{})
	defer l.Close()
	c := openCursor(t, l, "a", diskqueue.FromOldest())
	putBodies(t, l, 6)
	recs := readRecs(t, c, 4)
	if err := c.Unread([]diskqueue.Record{recs[3], recs[1]}); err != nil {
		t.Fatal(err)
	}
	if err := c.Unread([]diskqueue.Record{recs[2]}); err != nil {
		t.Fatal(err)
	}
	if err := c.Unread([]diskqueue.Record{recs[0], {Seq: 4}}); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Fatalf("Unread of a seq not handed out: %v, want ErrNotInFlight", err)
	}
	if d := c.Depth(); d != 6 {
		t.Fatalf("Depth = %d, want 6", d)
	}
	rec, err := c.Read(context.Background())
	if err != nil || rec.Seq != 1 || string(rec.Body) != string(body(1)) {
		t.Fatalf("Read = %d %q %v, want the record given back first, 1", rec.Seq, rec.Body, err)
	}
	got := recSeqs(readRecs(t, c, 4))
	if fmt.Sprint(got) != "[2 3 4 5]" {
		t.Fatalf("read after Unread: %v, want [2 3 4 5]", got)
	}
	for _, seq := range []uint64{0, 1, 2, 3, 4, 5} {
		if err := c.Ack(seq); err != nil {
			t.Fatalf("Ack(%d) of a record read again: %v", seq, err)
		}
	}

	putBodies(t, l, 2) // 6, 7
	recs = readRecs(t, c, 2)
	if err := c.Unread(recs); err != nil {
		t.Fatal(err)
	}
	if err := c.Empty(); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, c)
}

// TestCursorDiscarded: a record read and not acknowledged is discarded
// once Empty acknowledged it for the cursor; one the reader acknowledged
// itself, or still holds, is not.
func TestCursorDiscarded(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{})
	defer l.Close()
	c := openCursor(t, l, "a", diskqueue.FromOldest())
	putBodies(t, l, 3)
	readRecs(t, c, 3)
	if c.Discarded(1) {
		t.Fatal("Discarded(1) while in flight")
	}
	if err := c.Ack(1); err != nil {
		t.Fatal(err)
	}
	if c.Discarded(2) {
		t.Fatal("Discarded(2) while in flight")
	}
	if err := c.Empty(); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{0, 2} {
		if !c.Discarded(seq) {
			t.Fatalf("Discarded(%d) = false after Empty", seq)
		}
	}
}

// TestQueueOwnCursor: a Queue's own cursor is the one its Read and Ack
// use.
func TestQueueOwnCursor(t *testing.T) {
	q := openQueue(t, t.TempDir(), diskqueue.Options{})
	defer q.Close()
	if err := q.Put(context.Background(), body(0)); err != nil {
		t.Fatal(err)
	}
	rec, err := q.OwnCursor().Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(rec.Seq); err != nil {
		t.Fatalf("Queue.Ack of a record its own cursor read: %v", err)
	}
	if f := q.OwnCursor().Floor(); f != 1 {
		t.Fatalf("Floor = %d, want 1", f)
	}
}
