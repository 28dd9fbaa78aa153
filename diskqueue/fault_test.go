package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
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

// TestFaultGuards: copyMapped copies what the mapping holds and refuses,
// touching nothing, a range outside it; guarded and copyMapped report a
// fault on a mapping whose file was cut short underneath as false, and
// the process lives; any other panic goes on through the guard.
func TestFaultGuards(t *testing.T) {
	m := []byte("0123456789")
	b := make([]byte, 4)
	if !copyMapped(b, m, 3) || string(b) != "3456" {
		t.Fatalf("copyMapped inside the mapping: %q", b)
	}
	for _, off := range []int64{-1, 7, 100} {
		if copyMapped(b, m, off) {
			t.Fatalf("copyMapped at %d of a 10-byte mapping reported success", off)
		}
	}
	if copyMapped(b, nil, 0) {
		t.Fatal("copyMapped of no mapping reported success")
	}
	if !guarded(func() {}) {
		t.Fatal("guarded reported a fault where nothing faulted")
	}
	func() {
		defer func() {
			if v := recover(); v != "not a fault" {
				t.Fatalf("guarded swallowed or changed a panic that is not a fault: %v", v)
			}
		}()
		guarded(func() { panic("not a fault") })
		t.Fatal("guarded returned after a panic that is not a fault")
	}()

	path := filepath.Join(t.TempDir(), "mapped")
	f, err := vfs.OS.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rm, ok := f.(vfs.ReadMapper)
	if !ok {
		t.Skip("files are not mapped here")
	}
	size := 2 * pageSize
	if _, err := f.WriteAt(bytes.Repeat([]byte{'x'}, size), 0); err != nil {
		t.Fatal(err)
	}
	mm, err := rm.MapRead(size)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap(mm)
	if !copyMapped(b, mm, int64(pageSize)) || string(b) != "xxxx" {
		t.Fatalf("copyMapped of the file before the cut: %q", b)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if copyMapped(b, mm, int64(pageSize)+8) {
		t.Fatal("copyMapped of a page the file no longer holds reported success")
	}
	var sink byte
	if guarded(func() { sink = mm[pageSize+16] }) {
		t.Fatalf("touching a page the file no longer holds: no fault reported (read %q)", sink)
	}
}
