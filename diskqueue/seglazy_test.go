package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// openCounter counts the files opened per name.
type openCounter struct {
	fileSystem
	mu     sync.Mutex
	opened map[string]int
}

func (c *openCounter) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	c.mu.Lock()
	c.opened[filepath.Base(name)]++
	c.mu.Unlock()
	return c.fileSystem.OpenFile(name, flag, perm)
}

func (c *openCounter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name, k := range c.opened {
		if strings.HasPrefix(name, prefix) {
			n += k
		}
	}
	return n
}

// putFixture writes n records faultBody(i) with small segments and closes.
func putFixture(t *testing.T, dir string, n int) {
	t.Helper()
	q, err := Open(dir, Options{MaxSegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := q.Put(context.Background(), faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenLeavesSealedSegmentsClosed: Open takes sealed segments from the
// directory listing, which is what keeps its cost flat as the queue grows;
// their files are opened on first use, and then everything reads back.
func TestOpenLeavesSealedSegmentsClosed(t *testing.T) {
	dir := t.TempDir()
	putFixture(t, dir, 200)
	first := segmentName(0, "")
	c := &openCounter{fileSystem: vfs.OS, opened: map[string]int{}}
	q, err := Open(dir, Options{MaxSegmentBytes: 300, FS: c})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if len(q.segs) < 10 {
		t.Fatalf("fixture has %d segments, want many", len(q.segs))
	}
	// Only the newest sealed segment's time index is read, for the
	// running maximum the tail's time index continues.
	logs, timeIndexes := 0, 0
	for _, s := range q.segs[:len(q.segs)-1] {
		logs += c.count(segmentName(s.base, logSuffix)) + c.count(segmentName(s.base, indexSuffix))
		timeIndexes += c.count(segmentName(s.base, timeIndexSuffix))
	}
	if logs != 0 || timeIndexes > 1 {
		t.Fatalf("Open opened %d logs and indexes and %d time indexes of sealed segments, want 0 and at most 1: %v", logs, timeIndexes, c.opened)
	}
	got := readAll(t, q)
	if len(got) != 200 {
		t.Fatalf("read %d records, want 200", len(got))
	}
	for i, b := range got {
		if !bytes.Equal(b, faultBody(i)) {
			t.Fatalf("record %d: %q", i, b)
		}
	}
	if c.count(first) == 0 {
		t.Fatal("reading did not open the first segment")
	}
}

// TestLazyOpenFailureIsTransient: a failed open of a sealed segment on its
// first use is an I/O error the caller sees and the next Read retries; it
// is not damage. (Read tries the open twice: before readMu, where a failure
// is left for the second try to report, and under it; so opens fail until
// healed.)
func TestLazyOpenFailureIsTransient(t *testing.T) {
	dir := t.TempDir()
	putFixture(t, dir, 50)
	efs := &errorFS{}
	q, err := Open(dir, Options{MaxSegmentBytes: 300, FS: efs})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	efs.Arm(opOpen, 1, syscall.EMFILE, true)
	if _, err := q.Read(context.Background()); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Read while opens fail: got %v, want EMFILE", err)
	}
	efs.Heal()
	if _, err := q.ReadAt(20); err != nil {
		t.Fatalf("ReadAt after the fault: %v", err)
	}
	got := readAll(t, q)
	if len(got) != 50 || !bytes.Equal(got[0], faultBody(0)) {
		t.Fatalf("after a failed open: read %d records, first %q", len(got), got[0])
	}
	if st := q.Stats(); st.CorruptRecords != 0 || st.BadFiles != 0 || st.ReadErrors != 1 {
		t.Fatalf("Stats: %+v", st)
	}
}

// TestSealedHeaderDamage damages the header of a sealed segment, which Open
// no longer reads: it is found on first use. A damaged header over intact
// records loses nothing; with the first record damaged too, only that one
// is skipped; a format version this code does not know is an error on
// every read, never damage to skip.
func TestSealedHeaderDamage(t *testing.T) {
	type patch struct {
		at int64
		b  []byte
	}
	crc := patch{fileHeaderSize + lengthSize, []byte{1, 2, 3, 4}} // record 0's checksum; its length still frames it
	cases := []struct {
		name    string
		patches []patch
		missing int // records not served, from seq 0
		wantErr error
	}{
		{"magic", []patch{{0, []byte("XXXX")}}, 0, nil},
		{"magic and first record", []patch{{0, []byte("XXXX")}, crc}, 1, nil},
		{"version", []patch{{4, []byte{99}}}, 0, ErrUnsupportedVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			putFixture(t, dir, 50)
			f, err := os.OpenFile(filepath.Join(dir, segmentName(0, logSuffix)), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.patches {
				if _, err := f.WriteAt(p.b, p.at); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			q, err := Open(dir, Options{MaxSegmentBytes: 300})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer q.Close()
			if tc.wantErr != nil {
				for range 2 {
					if _, err := q.Read(context.Background()); !errors.Is(err, tc.wantErr) {
						t.Fatalf("Read: got %v, want %v", err, tc.wantErr)
					}
				}
				if st := q.Stats(); st.CorruptRecords != 0 || st.BadFiles != 0 {
					t.Fatalf("an unknown version was treated as damage: %+v", st)
				}
				return
			}
			got := readAll(t, q)
			if len(got) != 50-tc.missing {
				t.Fatalf("served %d records, want %d", len(got), 50-tc.missing)
			}
			for i, b := range got {
				if !bytes.Equal(b, faultBody(i+tc.missing)) {
					t.Fatalf("record %d: %q", i, b)
				}
			}
			if st := q.Stats(); st.CorruptRecords != int64(tc.missing) {
				t.Fatalf("CorruptRecords %d, want %d", st.CorruptRecords, tc.missing)
			}
		})
	}
}

// TestDiskBytesAfterFirstUse: Open counts a sealed segment's index files
// at their expected sizes without looking; once every segment has been
// used, Stats.DiskBytes is exactly what the files take, and before that it
// is off by no more than a few time-index entries per segment.
func TestDiskBytesAfterFirstUse(t *testing.T) {
	dir := t.TempDir()
	putFixture(t, dir, 400)
	var want int64
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, ackSuffix} {
		names, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
		for _, n := range names {
			info, err := os.Stat(n)
			if err != nil {
				t.Fatal(err)
			}
			want += info.Size()
		}
	}
	q, err := Open(dir, Options{MaxSegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	segs := int64(q.Stats().Segments)
	if got := q.Stats().DiskBytes; got < want-segs*2*timeIndexEntrySize || got > want+segs*2*timeIndexEntrySize {
		t.Fatalf("DiskBytes before first use %d, files take %d: more than two time-index entries per segment apart", got, want)
	}
	for i := range 400 {
		if _, err := q.ReadAt(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := q.Stats().DiskBytes; got != want {
		t.Fatalf("DiskBytes after every segment was used: %d, files take %d", got, want)
	}
}
