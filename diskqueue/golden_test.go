package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/v1 and testdata/v2 from the current encoder")

// goldenRecords is what testdata/v1 holds: two segments, a compressed and a
// plain record, an empty body, a clock that steps backwards, and one record
// acknowledged (so the cursor is past it).
var goldenRecords = []struct {
	body []byte
	ts   int64
}{
	{[]byte("first"), 1_700_000_000_000_000_000},
	{bytes.Repeat([]byte("compress me "), 8), 1_700_000_001_000_000_000},
	{nil, 1_700_000_002_000_000_000},
	{[]byte("clock stepped back"), 1_700_000_000_500_000_000},
	{[]byte("last"), 1_700_000_003_000_000_000},
}

func writeGolden(t *testing.T, dir string) {
	t.Helper()
	i := 0
	clock := func() time.Time { ts := goldenRecords[i].ts; i++; return time.Unix(0, ts) }
	q, err := Open(dir, Options{MaxSegmentBytes: 160, Compress: true, clockForTesting: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range goldenRecords {
		if err := q.Put(context.Background(), r.body); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := q.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(rec.Seq); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, lockName))
}

// checkGolden writes the files of testdata/version afresh with write
// (with -update, over the committed ones), fails for each committed file
// the encoder no longer writes byte for byte, and returns a copy of the
// committed files for the decoder to read.
func checkGolden(t *testing.T, version, test string, write func(*testing.T, string)) string {
	t.Helper()
	golden := filepath.Join("testdata", version)
	fresh := t.TempDir()
	write(t, fresh)
	if *update {
		os.RemoveAll(golden)
		if err := os.CopyFS(golden, os.DirFS(fresh)); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./diskqueue -run %s -update to create)", err, test)
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(golden, e.Name()))
		got, err := os.ReadFile(filepath.Join(fresh, e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: the encoder no longer writes the %s bytes", e.Name(), version)
		}
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(golden)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGoldenV1 pins the on-disk format: today's encoder must write exactly
// the committed bytes, and today's decoder must read them. A change to
// either fails here and calls for a new format version.
func TestGoldenV1(t *testing.T) {
	dir := checkGolden(t, "v1", "TestGoldenV1", writeGolden)
	q, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { q.Close() }()
	if st := q.Stats(); st.ReadSeq != 1 || st.WriteSeq != 5 || st.Segments < 2 {
		t.Fatalf("golden stats: %+v", st)
	}
	for seq, want := range goldenRecords {
		rec, err := q.ReadAt(uint64(seq))
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", seq, err)
		}
		if !bytes.Equal(rec.Body, want.body) || rec.Time.UnixNano() != want.ts {
			t.Fatalf("seq %d: got %q at %d, want %q at %d", seq, rec.Body, rec.Time.UnixNano(), want.body, want.ts)
		}
	}
	if seq, err := q.SeekTime(time.Unix(0, 1_700_000_000_600_000_000)); err != nil || seq != 1 {
		t.Fatalf("SeekTime: got %d, %v; want 1", seq, err)
	}
	// Written before acknowledgement files existed, the queue drains as it
	// is: each segment gets its .ack on first use, and what is acknowledged
	// stays so across a reopen.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for want := uint64(1); want < 5; want++ {
		rec, err := q.Read(done)
		if err != nil || rec.Seq != want {
			t.Fatalf("drain of the v1 queue: got seq %d, %v; want %d", rec.Seq, err, want)
		}
		if want%2 == 1 { // 1 and 3: out of order, above the floor
			if err := q.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	q.Close()
	q, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint64{2, 4} {
		rec, err := q.Read(done)
		if err != nil || rec.Seq != want {
			t.Fatalf("after reopen: got seq %d, %v; want %d (1 and 3 were acknowledged)", rec.Seq, err, want)
		}
	}
}

// writeGoldenCompacted writes testdata/v2: the records of testdata/v1 in a
// log of the same shape (no cursor), whose first segment is then
// compacted: seqs 1 (compressed, in the middle) and 3 (the segment's last)
// removed.
func writeGoldenCompacted(t *testing.T, dir string) {
	t.Helper()
	i := 0
	clock := func() time.Time { ts := goldenRecords[i].ts; i++; return time.Unix(0, ts) }
	l, err := OpenLog(dir, Options{MaxSegmentBytes: 160, Compress: true, clockForTesting: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range goldenRecords {
		if err := l.Put(ctx, r.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := l.Compact(ctx, 0, func(rec Record) bool { return rec.Seq != 1 && rec.Seq != 3 })
	if err != nil || st.Removed != 2 {
		t.Fatalf("Compact: %+v, %v", st, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, lockName))
}

// TestGoldenV2 pins a compacted segment's format (its log and index at
// version 2, the index's checksum, the time index over the records kept):
// today's encoder must write exactly the committed bytes, and today's
// decoder must read them.
func TestGoldenV2(t *testing.T) {
	dir := checkGolden(t, "v2", "TestGoldenV2", writeGoldenCompacted)
	l, err := OpenLog(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq, want := range goldenRecords {
		rec, err := l.ReadAt(uint64(seq))
		if seq == 1 || seq == 3 {
			if !errors.Is(err, ErrCompacted) {
				t.Fatalf("ReadAt(%d) of a removed record: %v, want ErrCompacted", seq, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(rec.Body, want.body) || rec.Time.UnixNano() != want.ts {
			t.Fatalf("seq %d: got %q at %d, %v; want %q at %d", seq, rec.Body, rec.Time.UnixNano(), err, want.body, want.ts)
		}
	}
	// Seq 1 (1_700_000_001) is gone: the first record at or after
	// 1_700_000_000_600_000_000 is now seq 2.
	if seq, err := l.SeekTime(time.Unix(0, 1_700_000_000_600_000_000)); err != nil || seq != 2 {
		t.Fatalf("SeekTime: got %d, %v; want 2", seq, err)
	}
	var seqs []uint64
	for rec, err := range l.Scan(0, maxSeq) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, rec.Seq)
	}
	if fmt.Sprint(seqs) != "[0 2 4]" {
		t.Fatalf("Scan yields %v, want [0 2 4]", seqs)
	}
}
