package diskqueue

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The segment scanner's policies, timed where they read a whole segment:
// the tail scan of a last segment without an index (a read-only view's
// open, which changes nothing, so each round does the same work), an
// index rebuild of a sealed segment, and Verify of a segment holding one
// damaged record.
//
//	go test ./diskqueue -run '^$' -bench 'ScanTail|RebuildIndex|VerifyDamaged' -count 6

// scanBenchLog fills dir with n 100-byte records in segments of segBytes,
// closed, and returns the path of segment 0's log.
func scanBenchLog(b *testing.B, dir string, n int, segBytes int64) string {
	b.Helper()
	q := putBench(b, dir, Options{NoSync: true, MaxSegmentBytes: segBytes}, n)
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	return filepath.Join(dir, segmentName(0, logSuffix))
}

func BenchmarkScanTail(b *testing.B) {
	dir := b.TempDir()
	const n = 200_000
	scanBenchLog(b, dir, n, 64<<20)
	os.Remove(filepath.Join(dir, segmentName(0, indexSuffix)))
	b.ReportAllocs()
	for b.Loop() {
		q, err := OpenReadOnly(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if got := q.Stats().WriteSeq; got != n {
			b.Fatalf("WriteSeq %d, want %d", got, n)
		}
		q.Close()
	}
}

func BenchmarkRebuildIndex(b *testing.B) {
	dir := b.TempDir()
	const n = 200_000
	scanBenchLog(b, dir, n, 16<<20) // a sealed segment 0, and more
	index := filepath.Join(dir, segmentName(0, indexSuffix))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		os.Remove(index)
		b.StartTimer()
		q, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if got, err := q.RebuildIndexes(context.Background()); err != nil || got != 1 {
			b.Fatalf("RebuildIndexes: %d, %v", got, err)
		}
		q.Close()
	}
}

func BenchmarkVerifyDamaged(b *testing.B) {
	dir := b.TempDir()
	const n = 100_000
	name := scanBenchLog(b, dir, n, 16<<20)
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	// The length of a record in the middle: only a search of the bytes
	// finds the next one.
	if _, err := f.WriteAt([]byte{0x7f, 0xff, 0xff, 0xff}, fileHeaderSize+125*(n/4)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ReportAllocs()
	for b.Loop() {
		rep, err := Verify(dir)
		if err != nil || len(rep.Problems) == 0 {
			b.Fatalf("Verify: %v, %v", rep.Problems, err)
		}
	}
}
