package diskqueue_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestIndexDamage deletes, truncates and scribbles on index files: lookups
// stay right and the rebuild is reported. Sizes are checked at Open; a
// sealed segment's headers when it is first used.
func TestIndexDamage(t *testing.T) {
	opts := diskqueue.Options{MaxSegmentBytes: 600}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"delete sealed index", func(t *testing.T, dir string) { os.Remove(segFile(dir, 0, "index")) }},
		{"truncate sealed index", func(t *testing.T, dir string) { os.Truncate(segFile(dir, 0, "index"), 21) }},
		{"delete sealed time index", func(t *testing.T, dir string) { os.Remove(segFile(dir, 0, "timeindex")) }},
		{"delete last index", func(t *testing.T, dir string) { os.Remove(lastFile(t, dir, "index")) }},
		{"truncate last index", func(t *testing.T, dir string) { os.Truncate(lastFile(t, dir, "index"), 20) }},
		{"scribble last index", func(t *testing.T, dir string) {
			name := lastFile(t, dir, "index")
			b, _ := os.ReadFile(name)
			for i := 16; i < len(b); i++ {
				b[i] = 0xEE
			}
			os.WriteFile(name, b, 0o644)
		}},
		{"scribble index header", func(t *testing.T, dir string) {
			f, _ := os.OpenFile(segFile(dir, 0, "index"), os.O_RDWR, 0)
			f.WriteAt([]byte("XXXX"), 0)
			f.Close()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFixture(t, dir, 100, opts)
			tc.damage(t, dir)
			q := openQueue(t, dir, opts)
			defer q.Close()
			for i := 0; i < 100; i++ {
				rec, err := q.ReadAt(uint64(i))
				if err != nil || !bytes.Equal(rec.Body, body(i)) {
					t.Fatalf("ReadAt(%d): %q, %v", i, rec.Body, err)
				}
			}
			// A damaged header is found when the segment is first used,
			// the other cases at Open: either way before this.
			if got := q.Stats().IndexRebuilds; got == 0 {
				t.Fatal("rebuild not reported in Stats")
			}
			checkServed(t, drain(t, q))
		})
	}
}

// TestRebuildIndexes: a sealed segment's damaged index is rebuilt by
// RebuildIndexes, not left for its first use, and counted; the others
// are left alone.
func TestRebuildIndexes(t *testing.T) {
	dir := t.TempDir()
	opts := diskqueue.Options{MaxSegmentBytes: 1 << 10}
	writeFixture(t, dir, 200, opts)
	name := segFile(dir, 0, "index")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Verify names the damage (it said the header was 0 bytes: the view
	// had not opened the index it found damaged).
	rep, err := diskqueue.Verify(dir)
	if err != nil || len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0].Err.Error(), "bad magic") {
		t.Fatalf("Verify of a flipped index magic: %v %+v", err, rep.Problems)
	}
	q := openQueue(t, dir, opts)
	n, err := q.RebuildIndexes(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("RebuildIndexes = %d, %v; want 1 rebuilt", n, err)
	}
	if got := q.Stats().IndexRebuilds; got != 1 {
		t.Errorf("IndexRebuilds = %d, want 1", got)
	}
	if n, err := q.RebuildIndexes(context.Background()); err != nil || n != 0 {
		t.Errorf("a second RebuildIndexes = %d, %v; want none", n, err)
	}
	q.Close()
	if _, err := q.RebuildIndexes(context.Background()); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("RebuildIndexes after Close: %v, want ErrClosed", err)
	}
	if rep, err := diskqueue.Verify(dir); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("Verify after the rebuild: %v %+v", err, rep.Problems)
	}
}
