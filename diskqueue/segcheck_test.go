package diskqueue

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSealedSegmentBeforeTombstonesKeepsItsEnd: Open gives a sealed
// segment the base of the next log as its end (openSealedLazily's next),
// but when acknowledgement tombstones follow it the next log is past them:
// segment 0 here is taken to hold seqs 0..8, the tombstones' 3..8 too. Its
// sequence index then looks short for that many records and is rebuilt on
// first use (counted in IndexRebuilds and logged as repaired, though
// nothing was wrong with it), and acknowledging its last record moves the
// read cursor to 3 only, the "first clear bit" of the bitmap past its real
// end, until the next sync tick walks the floor over the tombstones.
// Found by TestPowerCutAtEverySync, and fixed with it.
func TestSealedSegmentBeforeTombstonesKeepsItsEnd(t *testing.T) {
	dir := t.TempDir()
	var logs lockedBuffer
	opts := Options{
		MaxSegmentBytes: threePerSegment,
		SyncEvery:       1,
		SyncInterval:    time.Hour, // no tick moves the floor meanwhile
		Logger:          slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	tombstoneFixture(t, dir, opts)
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	rec, err := q.Read(done)
	if err != nil || rec.Seq != 2 {
		t.Fatalf("after a restart Read gave seq %d, %v; want the unacknowledged 2", rec.Seq, err)
	}
	if err := q.Ack(2); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.ReadSeq != 12 || st.IndexRebuilds != 0 {
		t.Errorf("everything acknowledged: read cursor %d (want 12), %d index rebuilds (want 0); segment 0 ends at %d (want 3)\nwarnings:\n%s",
			st.ReadSeq, st.IndexRebuilds, q.segmentAt(0).endNow(), logs.String())
	}
}

// TestZeroedHeaderOfSyncedLastSegment: a last segment whose header reads
// as zeros and whose records were fsynced (the header's sector damaged) is
// repaired from its records, as FORMAT.md says, not taken for one a power
// cut left never fsynced and removed with its records (a review of
// neverSynced, which now looks at the first record's frame too).
func TestZeroedHeaderOfSyncedLastSegment(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 256}
	q := mustOpen(t, dir, opts)
	const n = 20
	for i := 0; i < n; i++ {
		if err := q.Put(ctx, []byte(fmt.Sprintf("record %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*"+logSuffix))
	if len(logs) < 2 {
		t.Fatalf("%d segments, want 2 or more", len(logs))
	}
	name := logs[len(logs)-1] // the last segment, records in it fsynced
	if st, _ := os.Stat(name); st.Size() <= fileHeaderSize {
		t.Fatalf("the last segment is %d bytes: no record in it", st.Size())
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, fileHeaderSize), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	q = mustOpen(t, dir, opts)
	defer q.Close()
	if got := len(readAll(t, q)); got != n {
		t.Fatalf("after the last segment's header was zeroed, %d of %d fsynced records read back, want %d (its records are intact)", got, n, n)
	}
}
