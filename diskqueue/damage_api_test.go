package diskqueue_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestDamageInSealedSegment corrupts a record in the middle of a sealed
// segment: it is skipped, copied to a .bad file and counted, and the
// records after it, in the same segment and later ones, are served.
func TestDamageInSealedSegment(t *testing.T) {
	dir := t.TempDir()
	opts := diskqueue.Options{MaxSegmentBytes: 400}
	offs := writeFixture(t, dir, 40, opts)
	f, err := os.OpenFile(segFile(dir, 0, "log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Scribble over the length and CRC of record 3, so framing cannot say
	// where record 4 starts; the sequence index must.
	if _, err := f.WriteAt([]byte{0x7f, 0xff, 0, 1, 2, 3, 4}, offs[3]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	q := openQueue(t, dir, opts)
	defer q.Close()
	if _, err := q.ReadAt(3); !errors.Is(err, diskqueue.ErrCorrupt) {
		t.Fatalf("ReadAt of the damaged record: got %v, want ErrCorrupt", err)
	}
	seen := checkServed(t, drain(t, q))
	for i := 0; i < 40; i++ {
		if i != 3 && !seen[uint64(i)] {
			t.Fatalf("record %d not served", i)
		}
	}
	if seen[3] {
		t.Fatal("damaged record served")
	}
	st := q.Stats()
	if st.CorruptRecords != 1 || st.BadFiles != 1 {
		t.Fatalf("Stats: CorruptRecords %d BadFiles %d, want 1 and 1", st.CorruptRecords, st.BadFiles)
	}
	bad, _ := filepath.Glob(filepath.Join(dir, "*.bad"))
	if len(bad) != 1 {
		t.Fatalf(".bad files: got %v", bad)
	}
	if err := q.Put(context.Background(), body(40)); err != nil {
		t.Fatal(err)
	}
}
