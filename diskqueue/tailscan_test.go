package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// tailWithDamage writes n records in one segment, closes the queue,
// damages record bad with damage (given the frame's bytes, in place) and
// removes the sequence index, so that nothing but the log says where the
// records after the damage are. It returns the log's path.
func tailWithDamage(t *testing.T, dir string, n, bad int, damage func(frame []byte)) string {
	t.Helper()
	q := mustOpen(t, dir, Options{})
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, segmentName(0, logSuffix))
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(fileHeaderSize)
	for i := 0; i < bad; i++ {
		m, err := frameLength(b[off:], maxReadBody)
		if err != nil {
			t.Fatal(err)
		}
		off += int64(m)
	}
	m, _ := frameLength(b[off:], maxReadBody)
	damage(b[off : off+int64(m)])
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, segmentName(0, indexSuffix)))
	return name
}

// checkAroundDamage checks that q holds n records, record bad reads as
// damage and the others as put.
func checkAroundDamage(t *testing.T, q *Queue, n, bad int) {
	t.Helper()
	if got := q.Stats().WriteSeq; got != uint64(n) {
		t.Fatalf("WriteSeq %d, want %d: the records after the damage were not found", got, n)
	}
	for i := 0; i < n; i++ {
		rec, err := q.ReadAt(uint64(i))
		if i == bad {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ReadAt(%d) of the damaged record: %v, want ErrCorrupt", i, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(rec.Body, faultBody(i)) {
			t.Fatalf("ReadAt(%d): %q, %v", i, rec.Body, err)
		}
	}
}

// TestReadOnlyOpenResumesPastMidTailDamage: a read-only view of a last
// segment damaged in the middle, with no index to say where the records
// after the damage are and more of them than the end-of-log check
// (wholeFrames) counts, finds them, as Open's recovery does: both run the
// same scan (scanTail). The view used to stop at the damage and take the
// rest for a torn tail.
func TestReadOnlyOpenResumesPastMidTailDamage(t *testing.T) {
	const n, bad = 300, 100
	dir := t.TempDir()
	tailWithDamage(t, dir, n, bad, func(frame []byte) { frame[len(frame)-1] ^= 0xff }) // its checksum fails
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkAroundDamage(t, ro, n, bad)
	ro.Close()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != n-1 {
		t.Fatalf("Verify found %d records, want %d: %v", rep.Records, n-1, rep.Problems)
	}
	q := mustOpen(t, dir, Options{})
	defer q.Close()
	checkAroundDamage(t, q, n, bad)
}
