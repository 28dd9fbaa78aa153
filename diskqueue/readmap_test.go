package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestDeletedSegmentLetGo: a segment deleted once every record of it is
// acknowledged is unmapped with the deletion, even when the cursor whose
// reader last read it is idle there: a mapping would keep the deleted
// file's blocks allocated.
func TestDeletedSegmentLetGo(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 16 << 10, NoSync: true})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 400; i++ {
		if err := q.Put(ctx, bytes.Repeat([]byte{'y'}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	first := q.Segments()[0]
	seg, _ := q.segmentFor(first.Base)
	f := seg.files.Load()
	for seq := first.Base; seq < first.End; seq++ {
		rec, err := q.Read(ctx)
		if err != nil || rec.Seq != seq {
			t.Fatalf("Read: seq %d, %v; want %d", rec.Seq, err, seq)
		}
		if err := q.Ack(seq); err != nil {
			t.Fatal(err)
		}
	}
	// The reader stays at the segment's end until the next Read.
	if err := q.Sync(ctx); err != nil { // a writer round: the deletion
		t.Fatal(err)
	}
	for i := 0; len(q.Segments()) > 0 && q.Segments()[0].Base == first.Base; i++ {
		if i == 1000 {
			t.Fatal("the acknowledged segment was not deleted")
		}
		q.Sync(ctx)
	}
	if n := f.refs.Load(); n != 0 {
		t.Fatalf("the deleted segment's files have %d holders, want none (unmapped)", n)
	}
	rec, err := q.Read(ctx)
	if err != nil || rec.Seq != first.End {
		t.Fatalf("Read after the deletion: seq %d, %v; want %d", rec.Seq, err, first.End)
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

// hookFS calls onOpen before every OpenFile.
type hookFS struct {
	fileSystem
	onOpen func(name string)
}

func (h hookFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	h.onOpen(name)
	return h.fileSystem.OpenFile(name, flag, perm)
}

// TestEnteringSegmentsOutsideReadMu: a drain after a restart enters
// segments whose files Open left unopened (lazily opened) and whose
// bitmaps no Read has opened yet; Read opens them before it takes the
// cursor's readMu (prepare), so neither another consumer nor an Ack waits
// behind that I/O.
func TestEnteringSegmentsOutsideReadMu(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 4 << 10, NoSync: true})
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		if err := q.Put(ctx, bytes.Repeat([]byte{'z'}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()

	var mu sync.Mutex
	var under []string
	var cur *Cursor
	h := hookFS{fileSystem: vfs.OS, onOpen: func(name string) {
		mu.Lock()
		defer mu.Unlock()
		if cur == nil || !(strings.HasSuffix(name, logSuffix) || strings.HasSuffix(name, indexSuffix) || strings.HasSuffix(name, ackSuffix)) {
			return
		}
		// The writer goroutine takes readMu now and then (housekeeping
		// asks each cursor what it has acknowledged): only a lock that
		// stays taken for as long as this open waits is this goroutine's.
		for i := 0; !cur.readMu.TryLock(); i++ {
			if i == 200 {
				under = append(under, filepath.Base(name))
				return
			}
			time.Sleep(time.Millisecond)
		}
		cur.readMu.Unlock()
	}}
	q = mustOpen(t, dir, Options{MaxSegmentBytes: 4 << 10, NoSync: true, FS: h})
	defer q.Close()
	if n := len(q.Segments()); n < 5 {
		t.Fatalf("%d segments, want several", n)
	}
	mu.Lock()
	cur = q.c
	mu.Unlock()
	for i := 0; i < 300; i++ {
		rec, err := q.Read(ctx)
		if err != nil || rec.Seq != uint64(i) {
			t.Fatalf("Read %d: seq %d, %v", i, rec.Seq, err)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(under) > 0 {
		t.Fatalf("files opened under the cursor's readMu while draining: %v", under)
	}
}
