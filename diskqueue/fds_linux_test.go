package diskqueue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openUnder counts this process's open descriptors, and its mappings, of
// files under dir, by suffix (".log", ".index", ".ack", ...).
func openUnder(t *testing.T, dir string) (fds, maps map[string]int) {
	t.Helper()
	fds, maps = map[string]int{}, map[string]int{}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors needs /proc/self/fd: %v", err)
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			fds[filepath.Ext(strings.TrimSuffix(target, " (deleted)"))]++
		}
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatalf("counting mappings needs /proc/self/maps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, dir+string(filepath.Separator)); i >= 0 {
			maps[filepath.Ext(strings.TrimSuffix(line[i:], " (deleted)"))]++
		}
	}
	return fds, maps
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestDescriptorsStayBounded: a log holding a backlog of hundreds of
// segments written by this process keeps a bounded number of descriptors
// and mappings open, whatever the number of segments: while it is written,
// after ReadAt has touched every retained segment, and while one cursor
// drains it and another idles at the start; and nothing of that costs a
// record or an acknowledgement across a Close and Open.
func TestDescriptorsStayBounded(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 4096, RetainBytes: 1 << 30}
	// Segments of about 110 records: 40,000 make about 360, and -short's
	// 20,000 about 190, both past twice the bounds below.
	n := 40000
	if testing.Short() {
		n = 20000
	}
	// A log and an index handle per segment the cache keeps, and those of
	// the active segment, its spare and the segments readers are in; per
	// cursor, the bitmaps it may have open before it closes some, and
	// those of the active segment, its spare, the segments its reader is
	// about to read and the eight holding records in flight (below).
	const cursors = 2
	bound := map[string]int{
		".log":       maxOpenSealed + 16,
		".index":     maxOpenSealed + 16,
		".timeindex": 4,
		".ack":       cursors * (maxOpenBitmaps + 16),
		"":           4, // the cursor files and the lock
	}
	check := func(when string) {
		t.Helper()
		fds, maps := openUnder(t, dir)
		if testing.Verbose() {
			t.Logf("%s: %d descriptors %v, %d mappings %v", when, total(fds), fds, total(maps), maps)
		}
		for _, m := range []map[string]int{fds, maps} {
			for ext, n := range m {
				if n > bound[ext] {
					t.Fatalf("%s: %d descriptors %v and %d mappings %v open under the log's directory, want at most %d of each for %q files", when, total(fds), fds, total(maps), maps, bound[ext], ext)
				}
			}
		}
	}
	body := func(i int) []byte { return []byte(fmt.Sprintf("record-%06d", i)) }
	ctx := context.Background()

	l, err := OpenLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()
	a, err := l.Cursor("a", FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cursor("idle", FromOldest()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := l.Put(ctx, body(i)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		if i%1000 == 999 {
			// The writer goroutine seals rotated segments (closing their
			// write handles) behind the producer: look once it has.
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("after %d Puts", i+1))
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if segs := l.Stats().Segments; segs < 2*(maxOpenSealed+16) {
		t.Fatalf("only %d segments: the test wants more than twice what the cache keeps open", segs)
	}
	check("after the Puts")

	for i := 0; i < n; i++ {
		rec, err := l.ReadAt(uint64(i))
		if err != nil || !bytes.Equal(rec.Body, body(i)) {
			t.Fatalf("ReadAt %d = %q, %v", i, rec.Body, err)
		}
	}
	check("after ReadAt of every record")

	// Drain cursor a, leaving a few records in flight in segments far
	// apart: their bitmaps stay open, the rest need not.
	held := func(i int) bool { return i%5000 == 17 }
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		rec, err := a.Read(rctx)
		if err != nil || !bytes.Equal(rec.Body, body(i)) {
			t.Fatalf("Read %d = %q, %v", i, rec.Body, err)
		}
		if !held(i) {
			if err := a.Ack(rec.Seq); err != nil {
				t.Fatalf("Ack %d: %v", rec.Seq, err)
			}
		}
		if i%1000 == 999 {
			// Bitmaps the reader passed while bits in them were not
			// durable yet stay open until the writer goroutine's next
			// round has fsynced them: look after one.
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("after reading %d records", i+1))
		}
	}
	if err := l.Sync(ctx); err != nil { // a round of the writer goroutine
		t.Fatal(err)
	}
	check("after the drain")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Only the held records come back, in order, and then nothing.
	if l, err = OpenLog(dir, opts); err != nil {
		t.Fatal(err)
	}
	if a, err = l.Cursor("a", FromOldest()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if !held(i) {
			continue
		}
		rec, err := a.Read(rctx)
		if err != nil || !bytes.Equal(rec.Body, body(i)) {
			t.Fatalf("after reopening: Read = %q, %v; want %q", rec.Body, err, body(i))
		}
		if err := a.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if rec, err := a.Read(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("after reopening: Read = seq %d %q, %v; want nothing more", rec.Seq, rec.Body, err)
	}
	idle, err := l.Cursor("idle", FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if d := idle.Depth(); d != int64(n) {
		t.Fatalf("idle cursor's depth %d after reopening, want %d", d, n)
	}
	check("after reopening")
}
