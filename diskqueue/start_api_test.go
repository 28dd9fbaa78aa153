package diskqueue_test

import (
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// A cursor started at a time begins at the first record stored at or after
// it.
func TestCursorFromTime(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	putN(t, l, 0, 50)
	// Reopened, so that record 50 is stamped with a reading of its own:
	// one log may stamp it with a reading taken before record 49's Put
	// (clock.go), and on a busy machine that reading was older than a mid
	// taken with sleeps of 2 ms around it. mid lies between the two stamps.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, smallSegments)
	defer l.Close()
	putN(t, l, 50, 50)
	before, err := l.ReadAt(49)
	if err != nil {
		t.Fatal(err)
	}
	after, err := l.ReadAt(50)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Time.After(before.Time) {
		t.Fatalf("record 50 is stamped %v, record 49 %v", after.Time, before.Time)
	}
	mid := before.Time.Add(max(after.Time.Sub(before.Time)/2, 1))
	c := openCursor(t, l, "t", diskqueue.FromTime(mid))
	readN(t, c, 50, 50, true)
	expectNothing(t, c)
	late := openCursor(t, l, "late", diskqueue.FromTime(time.Now().Add(time.Hour)))
	putN(t, l, 100, 1)
	readN(t, late, 100, 1, true)
}
