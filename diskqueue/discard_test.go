package diskqueue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// Cursor.Empty drops one cursor's backlog, in flight or not: the other
// cursor keeps every record, the segments only the emptied one held go at
// once, a read waiting after it gets only what is put next, and all of it
// holds after a reopen.
func TestCursorEmpty(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	putN(t, l, 0, 200)
	held := readN(t, a, 0, 5, false) // in flight when emptied
	readN(t, b, 0, 60, true)
	ctx := context.Background()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.FirstSeq != 0 {
		t.Fatalf("FirstSeq = %d before Empty with cursor a at 0, want 0", st.FirstSeq)
	}

	if err := a.Empty(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Depth != 0 || st.InFlight != 0 || st.ReadSeq != 200 {
		t.Errorf("emptied cursor: Depth %d, InFlight %d, ReadSeq %d; want 0, 0, 200", st.Depth, st.InFlight, st.ReadSeq)
	}
	if err := a.Ack(held[0].Seq); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Errorf("Ack of a record in flight before Empty: %v, want ErrNotInFlight", err)
	}
	if st := b.Stats(); st.Depth != 140 || st.ReadSeq != 60 {
		t.Errorf("other cursor after Empty: Depth %d, ReadSeq %d; want 140, 60", st.Depth, st.ReadSeq)
	}
	st := l.Stats()
	if st.FirstSeq == 0 || st.FirstSeq > 60 {
		t.Errorf("FirstSeq = %d after Empty, want the segments below b's 60 deleted", st.FirstSeq)
	}
	if st.Depth != 140 || st.ReadSeq != 60 {
		t.Errorf("log Stats after Empty: Depth %d, ReadSeq %d; want the slowest cursor's 140, 60", st.Depth, st.ReadSeq)
	}
	expectNothing(t, a)

	// A Read waiting on the emptied cursor gets the next record put.
	got := make(chan diskqueue.Record, 1)
	go func() {
		rec, err := a.Read(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- rec
	}()
	putN(t, l, 200, 1)
	if rec := <-got; string(rec.Body) != string(body(200)) {
		t.Fatalf("Read after Empty: got %q, want %q", rec.Body, body(200))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, dir, smallSegments)
	defer l.Close()
	a = openCursor(t, l, "a", diskqueue.FromOldest())
	b = openCursor(t, l, "b", diskqueue.FromOldest())
	// 200 was handed out, not acknowledged: it comes back, nothing older.
	readN(t, a, 200, 1, true)
	expectNothing(t, a)
	readN(t, b, 60, 141, true)
	expectNothing(t, b)
	if err := b.Empty(); err != nil {
		t.Errorf("Empty of a cursor with nothing left: %v", err)
	}
}

func TestCursorEmptyErrors(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	putN(t, l, 0, 10)
	if err := l.DeleteCursor("a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Empty(); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Empty of a deleted cursor: %v, want ErrClosed", err)
	}
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Empty(); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Empty on a closed log: %v, want ErrClosed", err)
	}
	ro, err := diskqueue.OpenReadOnly(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	c, err := ro.Cursor("b", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Empty(); !errors.Is(err, diskqueue.ErrReadOnly) {
		t.Errorf("Empty on a read-only log: %v, want ErrReadOnly", err)
	}
}
