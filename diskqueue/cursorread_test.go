package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/vfs"
)

// TestReadPassesOverASegmentLeavingTheLog: the reader took the first
// record of a segment (nextRaw) just as the writer marked the segment gone
// (every cursor had acknowledged all of it), and readAckFor, finding it
// gone, failed: Read returned ErrNotFound, and the record, given back,
// failed every Read after it until the next Open (TestPowerCutAtEverySync
// met it once in 26 runs). The writer's part is played here at the
// "read-taken" point, between the two, under the cursor's lock as in
// life: segment 3 marked gone, the cursor's bitmap of it not yet opened.
func TestReadPassesOverASegmentLeavingTheLog(t *testing.T) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	var q *Queue
	var fired bool
	opts := Options{MaxSegmentBytes: threePerSegment, crashPointForTesting: func(p string) {
		if p != "read-taken" || fired || q.c.rd.seg.base != 3 {
			return
		}
		fired = true
		c, seg := q.c, q.c.rd.seg
		seg.gone.Store(true)
		if sa := c.segs[seg]; sa != nil && sa.ack != nil {
			sa.ack.close()
			sa.ack = nil
		}
		c.lastRead = nil
	}}
	var err error
	if q, err = Open(t.TempDir(), opts); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	putFixed(t, q, 9) // segments 0, 3 and 6
	var got []uint64
	for {
		rec, err := q.Read(done)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatalf("Read after %v: %v", got, err)
		}
		got = append(got, rec.Seq)
	}
	if !fired {
		t.Fatal("the reader never took a record of segment 3")
	}
	if want := []uint64{0, 1, 2, 6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v: segment 3 left the log as its first record was taken", got, want)
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
