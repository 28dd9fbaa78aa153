package diskqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

func segFile(dir string, base uint64, ext string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d.%s", base, ext))
}

// drain reads and acknowledges every record written so far, returning
// them. A Read with a context that is already done does not wait.
func drain(t testing.TB, q *diskqueue.Queue) []diskqueue.Record {
	t.Helper()
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var out []diskqueue.Record
	for {
		rec, err := q.Read(done)
		if errors.Is(err, context.Canceled) {
			return out
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		out = append(out, rec)
	}
}

// writeFixture makes a queue holding n records with bodies body(i) and
// returns the byte offsets where each record starts in the first segment.
func writeFixture(t testing.TB, dir string, n int, opts diskqueue.Options) []int64 {
	t.Helper()
	q := openQueue(t, dir, opts)
	putN(t, q, 0, n)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	var offs []int64
	off := int64(16)
	for i := 0; i < n; i++ {
		offs = append(offs, off)
		off += int64(25 + len(body(i)))
	}
	return offs
}

func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// checkServed asserts every record served is exactly the one put with its
// seq (never a wrong or made-up payload) and returns the seqs seen.
func checkServed(t testing.TB, recs []diskqueue.Record) map[uint64]bool {
	t.Helper()
	seen := make(map[uint64]bool)
	for _, r := range recs {
		if !bytes.Equal(r.Body, body(int(r.Seq))) {
			t.Fatalf("seq %d served %q, want %q", r.Seq, r.Body, body(int(r.Seq)))
		}
		if seen[r.Seq] {
			t.Fatalf("seq %d served twice", r.Seq)
		}
		seen[r.Seq] = true
	}
	return seen
}

// campaignOpts are the options the truncation and bit-flip campaigns open
// each damaged copy with: what they test is what Open and the reader make
// of the bytes, not durability (the power-cut tests are), and without
// fsyncs a few hundred Opens and Closes take a fraction of the time.
var campaignOpts = diskqueue.Options{NoSync: true}

// TestTruncateEveryOffset cuts the log at every byte of its last two
// records, as a crash mid-write would: Open must serve exactly the records
// before the cut, and keep accepting writes.
func TestTruncateEveryOffset(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	src := t.TempDir()
	const n = 6
	offs := writeFixture(t, src, n, diskqueue.Options{})
	logName := filepath.Base(segFile(src, 0, "log"))
	full, _ := os.ReadFile(filepath.Join(src, logName))
	t.Logf("%d cuts", int64(len(full))-offs[n-2])
	for cut := offs[n-2]; cut < int64(len(full)); cut++ {
		dir := copyDir(t, src)
		if err := os.Truncate(filepath.Join(dir, logName), cut); err != nil {
			t.Fatal(err)
		}
		q, err := diskqueue.Open(dir, campaignOpts)
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		want := n - 2
		if cut >= offs[n-1] {
			want = n - 1
		}
		recs := drain(t, q)
		checkServed(t, recs)
		if len(recs) != want {
			t.Fatalf("cut at %d: got %d records, want %d", cut, len(recs), want)
		}
		// The log continues where the good prefix ended.
		if err := q.Put(context.Background(), body(want)); err != nil {
			t.Fatal(err)
		}
		if recs := drain(t, q); len(recs) != 1 || recs[0].Seq != uint64(want) {
			t.Fatalf("cut at %d: after a new Put got %v", cut, recs)
		}
		q.Close()
	}
}

// TestFlipEveryBit flips each bit of a small segment in turn. Open must not
// fail (except for a flipped format version, which it must name), every
// record served must be the one put, and only records touching the flipped
// byte may be missing.
func TestFlipEveryBit(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	src := t.TempDir()
	const n = 5
	offs := writeFixture(t, src, n, diskqueue.Options{})
	logName := filepath.Base(segFile(src, 0, "log"))
	full, _ := os.ReadFile(filepath.Join(src, logName))
	recordAt := func(pos int64) int {
		for i := n - 1; i >= 0; i-- {
			if pos >= offs[i] {
				return i
			}
		}
		return -1
	}
	if testing.Short() {
		t.Logf("%d bit flips (-short: one per byte)", len(full))
	} else {
		t.Logf("%d bit flips", 8*len(full))
	}
	for pos := int64(0); pos < int64(len(full)); pos++ {
		for bit := 0; bit < 8; bit++ {
			if testing.Short() && bit != int(pos%8) {
				continue // -short: one bit of every byte, a different one each
			}
			dir := copyDir(t, src)
			b := append([]byte(nil), full...)
			b[pos] ^= 1 << bit
			if err := os.WriteFile(filepath.Join(dir, logName), b, 0o644); err != nil {
				t.Fatal(err)
			}
			q, err := diskqueue.Open(dir, campaignOpts)
			if pos == 4 {
				if !errors.Is(err, diskqueue.ErrUnsupportedVersion) {
					t.Fatalf("flipped version byte: got %v, want ErrUnsupportedVersion", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("flip %d.%d: Open: %v", pos, bit, err)
			}
			seen := checkServed(t, drain(t, q))
			damaged := recordAt(pos)
			for i := 0; i < n; i++ {
				if !seen[uint64(i)] && i != damaged {
					t.Fatalf("flip %d.%d: intact record %d not served (damaged %d)", pos, bit, i, damaged)
				}
			}
			if damaged >= 0 && seen[uint64(damaged)] {
				t.Fatalf("flip %d.%d: damaged record %d served", pos, bit, damaged)
			}
			if err := q.Put(context.Background(), []byte("after")); err != nil {
				t.Fatalf("flip %d.%d: Put after damage: %v", pos, bit, err)
			}
			q.Close()
		}
	}
}

// TestBitRotInTheLastRecord: the last record of a queue closed cleanly,
// then damaged at rest, was cut off at Open as a torn write (uncounted,
// its seq given to the next Put) and Verify reported nothing (a user's
// trial found it). A crash leaves a torn record cut short by the file's
// end or followed by preallocated zeros; a closed log ends where its last
// record does, so a record filling it whole was written whole.
func TestBitRotInTheLastRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flipped func(offs []int64) []int64 // offsets of the bytes to flip
		damaged []int
	}{
		{"last", func(offs []int64) []int64 { return []int64{offs[9] + 27} }, []int{9}},
		{"last two", func(offs []int64) []int64 { return []int64{offs[8] + 27, offs[9] + 27} }, []int{8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const n = 10
			offs := writeFixture(t, dir, n, diskqueue.Options{})
			name := segFile(dir, 0, "log")
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, off := range tc.flipped(offs) {
				b[off] ^= 0x40 // inside the body
			}
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := diskqueue.Verify(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) == 0 {
				t.Errorf("Verify of a closed queue whose last records are damaged reports no problem (pending tail %d bytes)", rep.PendingTail)
			}
			q := openQueue(t, dir, diskqueue.Options{})
			defer q.Close()
			if next := q.NextSeq(); next != n {
				t.Fatalf("after Open the log ends at seq %d, want %d: the damaged records were cut off as a torn write", next, n)
			}
			seen := checkServed(t, drain(t, q))
			for i := range n {
				if want := !slices.Contains(tc.damaged, i); seen[uint64(i)] != want {
					t.Errorf("record %d served: %v, want %v", i, seen[uint64(i)], want)
				}
			}
			if got := q.Stats().CorruptRecords; got != int64(len(tc.damaged)) {
				t.Errorf("CorruptRecords = %d, want %d", got, len(tc.damaged))
			}
			if err := q.Put(context.Background(), []byte("after")); err != nil {
				t.Fatal(err)
			}
			if rec, err := q.ReadAt(n); err != nil || string(rec.Body) != "after" {
				t.Fatalf("ReadAt(%d) after the damage = %q, %v; want the next Put's record", n, rec.Body, err)
			}
		})
		t.Run(tc.name+"/reopened", func(t *testing.T) {
			// The index of a log ending in damage kept for readers points
			// at it, as a rebuild would: each later Open rebuilt it again.
			dir := t.TempDir()
			offs := writeFixture(t, dir, 10, diskqueue.Options{})
			name := segFile(dir, 0, "log")
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, off := range tc.flipped(offs) {
				b[off] ^= 0x40
			}
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
			openQueue(t, dir, diskqueue.Options{}).Close() // keeps the damage, and its index
			q := openQueue(t, dir, diskqueue.Options{})
			defer q.Close()
			if got := q.Stats().IndexRebuilds; got != 0 {
				t.Errorf("a second Open rebuilt the index %d time(s), though the first left it right", got)
			}
			if next := q.NextSeq(); next != 10 {
				t.Errorf("NextSeq = %d after the second Open, want 10", next)
			}
		})
	}
}

func lastFile(t *testing.T, dir, ext string) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*."+ext))
	if len(names) == 0 {
		t.Fatalf("no .%s files", ext)
	}
	return names[len(names)-1]
}

// TestCursorDamage: a damaged cursor file never makes the queue start
// empty while data is on disk.
func TestCursorDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(string)
	}{
		{"deleted", func(p string) { os.Remove(p) }},
		{"zeroed", func(p string) { os.WriteFile(p, make([]byte, 64), 0o644) }},
		{"garbage", func(p string) { os.WriteFile(p, []byte("not a cursor at all, really not"), 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			q := openQueue(t, dir, diskqueue.Options{})
			putN(t, q, 0, 20)
			readN(t, q, 0, 5, true)
			q.Close()
			tc.damage(filepath.Join(dir, "cursor"))
			q = openQueue(t, dir, diskqueue.Options{})
			defer q.Close()
			recs := drain(t, q)
			checkServed(t, recs)
			// At-least-once: the acknowledged five may come back; the other
			// fifteen must.
			if len(recs) < 15 || recs[len(recs)-1].Seq != 19 {
				t.Fatalf("after cursor damage served %d records ending at %d", len(recs), recs[len(recs)-1].Seq)
			}
		})
	}
}

// TestTornRecordAtThePreallocatedEnd: a mapped log left by a SIGKILL has
// its preallocated size, and the record being copied may end exactly
// there (here the segment's last, at MaxSegmentBytes): torn between the
// body and its checksum, its frame fills the file by its length field as
// a record written whole does. Open must cut it as a torn write, not keep
// it as damage: its seq goes to the next Put, and nothing is counted
// corrupt after a plain crash (a review found the rule keeping it).
func TestTornRecordAtThePreallocatedEnd(t *testing.T) {
	dir := t.TempDir()
	const n = 73 // 16 + 73 x (25 + 87) = 8192
	opts := diskqueue.Options{MaxSegmentBytes: 8192}
	q := openQueue(t, dir, opts)
	body := make([]byte, 87)
	for range n {
		if err := q.Put(context.Background(), body); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// The bytes a kill between the last record's body and its checksum
	// leaves in the 8192-byte mapped file.
	name := segFile(dir, 0, "log")
	b, err := os.ReadFile(name)
	if err != nil || len(b) != 8192 {
		t.Fatalf("the log is %d bytes (%v), want 8192", len(b), err)
	}
	crc := 8192 - 112 + 4 // the last frame's CRC, after its length
	copy(b[crc:crc+4], []byte{0, 0, 0, 0})
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, dir, opts)
	defer q.Close()
	if next := q.NextSeq(); next != n-1 {
		t.Fatalf("after Open the log ends at seq %d, want %d: the torn record was kept", next, n-1)
	}
	drain(t, q)
	if got := q.Stats().CorruptRecords; got != 0 {
		t.Errorf("CorruptRecords = %d after a torn write, want 0", got)
	}
}
