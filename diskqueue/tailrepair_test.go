package diskqueue

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRecoveryResumesPastDamagedLength: a record in the middle of the last
// segment whose length field is damaged, with no index, hides where the
// next record starts from all but a search of the bytes: Open's recovery,
// a read-only view and Verify all find the records after it (the same
// resync), and none is cut off as a torn tail.
func TestRecoveryResumesPastDamagedLength(t *testing.T) {
	const n, bad = 300, 100
	dir := t.TempDir()
	name := tailWithDamage(t, dir, n, bad, func(frame []byte) { copy(frame, []byte{0x7f, 0xff, 0xff, 0xff}) })
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkAroundDamage(t, ro, n, bad)
	ro.Close()
	info, _ := os.Stat(name)
	q := mustOpen(t, dir, Options{})
	checkAroundDamage(t, q, n, bad)
	q.Close()
	if after, _ := os.Stat(name); after.Size() != info.Size() {
		t.Fatalf("Open cut the log from %d to %d bytes", info.Size(), after.Size())
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) != 0 {
		t.Fatalf("records kept as damage were copied aside as a torn tail: %v", bad)
	}
}
