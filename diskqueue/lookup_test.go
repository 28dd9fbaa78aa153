package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestLookupsAfterClose: ReadAt, Scan, SeekTime, Position and
// Unacknowledged after Close return ErrClosed. They returned ErrNotFound
// ("segment 0 was deleted"), as if the records had been consumed (a user
// trial found it).
func TestLookupsAfterClose(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		dir := t.TempDir()
		q := mustOpen(t, dir, Options{})
		if err := q.Put(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if readOnly {
			q.Close()
			var err error
			if q, err = OpenReadOnly(dir, Options{}); err != nil {
				t.Fatal(err)
			}
		}
		q.Close()
		if _, err := q.ReadAt(0); !errors.Is(err, ErrClosed) {
			t.Errorf("readOnly %v: ReadAt after Close: %v", readOnly, err)
		}
		if _, err := q.SeekTime(time.Time{}); !errors.Is(err, ErrClosed) {
			t.Errorf("readOnly %v: SeekTime after Close: %v", readOnly, err)
		}
		if _, err := q.Position(0); !errors.Is(err, ErrClosed) {
			t.Errorf("readOnly %v: Position after Close: %v", readOnly, err)
		}
		for _, err := range q.Scan(0, 1) {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("readOnly %v: Scan after Close: %v", readOnly, err)
			}
		}
		for _, err := range q.Unacknowledged(0, 1) {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("readOnly %v: Unacknowledged after Close: %v", readOnly, err)
			}
		}
	}
}

// TestLookupsRaceDeletion: ReadAt and Scan of old records while a consumer
// acknowledges and retention deletes segments, some never opened before.
// Every answer is the record put or ErrNotFound; nothing leaks or panics
// (run with -race).
func TestLookupsRaceDeletion(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	dir := t.TempDir()
	n := 3000 // in segments of 300 bytes, a deletion every few records
	if testing.Short() {
		n = 1000
	}
	putFixture(t, dir, n)
	q, err := Open(dir, Options{MaxSegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	check := func(rec Record, err error) {
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("lookup: %v", err)
			}
			return
		}
		if !bytes.Equal(rec.Body, faultBody(int(rec.Seq))) {
			t.Errorf("seq %d: %q", rec.Seq, rec.Body)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			for i := w; ; i += 7 {
				select {
				case <-stop:
					return
				default:
				}
				check(q.ReadAt(uint64(i % n)))
				for rec, err := range q.Scan(uint64(i%n), uint64(i%n+3)) {
					check(rec, err)
				}
			}
		})
	}
	got := readAll(t, q)
	close(stop)
	wg.Wait()
	if len(got) != n {
		t.Fatalf("drained %d, want %d", len(got), n)
	}
}
