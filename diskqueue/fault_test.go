package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"testing"
)

// TestSegmentCutUnderReader: another process cutting a sealed segment's
// log short while a cursor reads it through its mapping must not crash
// the process. ReadAt of a record past the cut returns an error; the
// cursor's Read, whose next touch of the mapping faults, goes over to pread
// and reports the cut records as damage (skipped, counted), as it did
// before reads were mapped, and goes on in the next segment.
func TestSegmentCutUnderReader(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 64 << 10, NoSync: true})
	defer q.Close()
	ctx := context.Background()
	body := func(i int) []byte { return []byte(fmt.Sprintf("%05d-%s", i, bytes.Repeat([]byte{'x'}, 90))) }
	const n = 2000 // a little over three segments
	for i := 0; i < n; i++ {
		if err := q.Put(ctx, body(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The writer goroutine seals rotated segments; a Sync waits for one
	// of its rounds.
	segs := q.Segments()
	for i := 0; len(segs) < 3 || !segs[0].Sealed; i++ {
		if i == 1000 {
			t.Fatalf("want sealed segments, have %+v", segs)
		}
		if err := q.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		segs = q.Segments()
	}
	first := segs[0]
	for i := 0; i < 10; i++ {
		rec, err := q.Read(ctx)
		if err != nil || !bytes.Equal(rec.Body, body(i)) {
			t.Fatalf("Read %d: %q, %v", i, rec.Body, err)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	seg, _ := q.segmentFor(first.Base)
	mapped := seg.files.Load().logMap != nil
	if !mapped && runtime.GOOS == "linux" && math.MaxInt > math.MaxInt32 {
		t.Fatal("the sealed segment's log is not mapped: the test would not cover the fault")
	}

	// Cut the log at a page boundary: the pages past the new end are gone
	// from every mapping of the file, so the next touch past it faults
	// (inside the last page, bytes past the end would read as zeros).
	const cut = 2 * 4096
	if err := os.Truncate(seg.path(logSuffix), cut); err != nil {
		t.Fatal(err)
	}
	last := first.End - 1
	if _, err := q.ReadAt(last); err == nil {
		t.Fatalf("ReadAt(%d) past the cut returned no error", last)
	}
	if rec, err := q.ReadAt(first.Base + 3); err != nil || !bytes.Equal(rec.Body, body(3)) {
		t.Fatalf("ReadAt of a record before the cut: %q, %v", rec.Body, err)
	}

	// Read serves the records before the cut, skips the rest of the
	// segment as damage and goes on.
	done, cancel := context.WithCancel(ctx)
	cancel()
	next := uint64(10)
	for {
		rec, err := q.Read(done)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatalf("Read after the cut: %v", err)
		}
		if rec.Seq < next || !bytes.Equal(rec.Body, body(int(rec.Seq))) {
			t.Fatalf("Read after the cut served seq %d %q, next expected at or after %d", rec.Seq, rec.Body, next)
		}
		if rec.Seq >= first.End && next < first.End {
			// The jump over the cut.
			if q.Stats().CorruptRecords == 0 {
				t.Fatal("the records past the cut were skipped without being counted")
			}
		}
		next = rec.Seq + 1
		q.Ack(rec.Seq)
	}
	if next != n {
		t.Fatalf("Read stopped at %d, want %d", next, n)
	}
	// Reading with pread (no mapping here), the reader's window may hold
	// a copy of the whole small segment from before the cut, and serve it.
	if got, want := q.Stats().CorruptRecords, int64(first.End-first.Base); mapped && (got <= 0 || got >= want) {
		t.Fatalf("CorruptRecords %d, want some of the segment's %d", got, want)
	}
}

// TestBitmapCutUnderAck: an acknowledgement bitmap cut short by another
// process makes the in-order Ack (setAtFloor, the guard Read's hot path
// shares with Ack) return the fault as an error, and the process lives.
func TestBitmapCutUnderAck(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{NoSync: true})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if err := q.Put(ctx, []byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := q.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Read(ctx); err != nil {
		t.Fatal(err)
	}
	q.c.readMu.Lock()
	a := q.c.state(q.c.rd.seg).ack
	q.c.readMu.Unlock()
	if a == nil || a.m == nil {
		t.Skip("the bitmap is not mapped here (write(2) path)")
	}
	if err := os.Truncate(a.name, 0); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(rec.Seq); !errors.Is(err, errFault) {
		t.Fatalf("Ack into a bitmap cut to zero: %v, want the fault as an error", err)
	}
}
