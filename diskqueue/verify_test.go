package diskqueue

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestVerifyShortSealedBitmap: a power cut can leave a sealed segment's
// bitmap as long as it was at its last fsync, before appends grew it.
// Open grows it again without a word; Verify reported it as damage.
// Found by a review of the crash recovery.
func TestVerifyShortSealedBitmap(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 1 << 10}
	q := mustOpen(t, dir, opts)
	ctx := context.Background()
	for i := range 100 {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	ack := filepath.Join(dir, segmentName(0, ackSuffix))
	if err := os.Truncate(ack, ackHeaderSize); err != nil {
		t.Fatal(err)
	}
	if rep, err := Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify of a sealed segment's bitmap a power cut left short: %v %+v", err, rep.Problems)
	}
	q = mustOpen(t, dir, opts)
	defer q.Close()
	if got := len(readAll(t, q)); got != 100 {
		t.Fatalf("read %d of 100 after a sealed segment's bitmap was left short", got)
	}
}

// TestVerifyTombstones: segments deleted behind a held record leave
// tombstones, which are not damage.
func TestVerifyTombstones(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 1 << 10})
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 200; i++ {
		rec, err := q.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 { // seq 0 stays in flight and pins its segment
			if err := q.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if tombs, _ := filepath.Glob(filepath.Join(dir, "*"+ackSuffix)); len(tombs) < 3 {
		t.Fatalf("acknowledgement files %v: want tombstones behind the pinned segment", tombs)
	}
	if rep, err := Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify of a queue with tombstones: %v %+v", err, rep.Problems)
	}
}

// TestVerifyReportsAckDamage: Verify checks each acknowledgement file's
// header; a damaged one is a problem (its acknowledgements above the cursor
// would come back), and Open recovers by recreating it.
func TestVerifyReportsAckDamage(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 1 << 10})
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify of a healthy queue: %v %+v", err, rep.Problems)
	}
	ack := filepath.Join(dir, segmentName(0, ackSuffix))
	b, err := os.ReadFile(ack)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if err := os.WriteFile(ack, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Problems[0].File != segmentName(0, ackSuffix) {
		t.Fatalf("Verify of a damaged acknowledgement file: %+v", rep.Problems)
	}
	q = mustOpen(t, dir, Options{MaxSegmentBytes: 1 << 10})
	defer q.Close()
	if got := len(readAll(t, q)); got != 100 {
		t.Fatalf("read %d of 100 after the acknowledgement file was damaged", got)
	}
}

// TestVerifyUnderLiveWrites: Verify of a queue being written reports no
// problem: what the writer has not published yet is a write in progress.
// The cursor drops its oldest segments at a 4 MiB budget, so Verify also
// meets segments deleted under it, and the log stays a few hundred
// segments however long the 30 runs take (unbounded, a slow machine let it
// grow past the descriptors a process may hold).
func TestVerifyUnderLiveWrites(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 16 << 10, MaxDiskBytes: 4 << 20})
	defer q.Close()
	q.c.SetDropWhenFull(true)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := q.Put(ctx, faultBody(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 30; i++ {
		rep, err := Verify(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("Verify %d of a healthy queue under live writes: %v", i, rep.Problems)
		}
	}
	close(stop)
	wg.Wait()
}
