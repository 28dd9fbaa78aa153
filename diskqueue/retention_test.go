package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestRetentionAndReplay keeps consumed segments for replay by seq and by
// time, bounded by bytes; the live cursor is not disturbed.
func TestRetentionAndReplay(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 1 << 10, RetainBytes: 6 << 10}
	q := mustOpen(t, dir, opts)
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	readAll(t, q)
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	if st.FirstSeq == 0 || st.FirstSeq >= 500 {
		t.Fatalf("FirstSeq %d: retention kept nothing or everything", st.FirstSeq)
	}
	if st.DiskBytes > 6<<10+2<<10 {
		t.Fatalf("DiskBytes %d well over RetainBytes", st.DiskBytes)
	}
	if _, err := q.ReadAt(st.FirstSeq - 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadAt before the retained range: got %v, want ErrNotFound", err)
	}
	n := 0
	for rec, err := range q.Scan(st.FirstSeq, 500) {
		if err != nil {
			t.Fatal(err)
		}
		if want := faultBody(int(st.FirstSeq) + n); !bytes.Equal(rec.Body, want) {
			t.Fatalf("Scan: got %q, want %q", rec.Body, want)
		}
		n++
	}
	if n != int(500-st.FirstSeq) {
		t.Fatalf("Scan returned %d records, want %d", n, 500-st.FirstSeq)
	}
	for _, err := range q.Scan(0, 10) {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Scan from a deleted seq: got %v, want ErrNotFound", err)
		}
	}
	if q.Depth() != 0 || q.Stats().ReadSeq != 500 {
		t.Fatalf("replay moved the live cursor: %+v", q.Stats())
	}
	// Reopen: the retained range survives.
	q.Close()
	q = mustOpen(t, dir, opts)
	defer q.Close()
	if got := q.Stats().FirstSeq; got != st.FirstSeq {
		t.Fatalf("FirstSeq after reopen: got %d, want %d", got, st.FirstSeq)
	}
}

func TestRetentionByAge(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	q := mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: 1 << 10, RetainAge: time.Hour, clockForTesting: clock})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Sync(ctx)
	readAll(t, q)
	q.Sync(ctx)
	// The records are stamped 2023; the writer's wall clock is now, so
	// every consumed segment is older than an hour and goes.
	if st := q.Stats(); st.Segments != 1 {
		t.Fatalf("Segments %d: age retention kept old segments", st.Segments)
	}
}

func TestEmpty(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 512})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Sync(ctx)
	rec, _ := q.Read(ctx)
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	if q.Depth() != 0 {
		t.Fatalf("Depth after Empty: %d", q.Depth())
	}
	if err := q.Ack(rec.Seq); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("Ack after Empty: got %v, want ErrNotInFlight", err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "0*.log")) // segments, not the spare
	if len(logs) != 1 {
		t.Fatalf("files after Empty: %v", logs)
	}
	q.Put(ctx, []byte("new"))
	q.Sync(ctx)
	if got := readAll(t, q); len(got) != 1 || string(got[0]) != "new" {
		t.Fatalf("after Empty got %q", got)
	}
}

// TestEmptyRacesProducers: Put rolls segments itself, so Empty must delete
// only what came before the segment it rolled to. Producers roll two more
// segments inside Empty's window here: what they put survives, and the
// queue stays usable.
func TestEmptyRacesProducers(t *testing.T) {
	ctx := context.Background()
	body := bytes.Repeat([]byte("e"), 1000)
	var q *Queue
	opts := Options{MaxSegmentBytes: 4096}
	opts.emptyHookForTesting = func() {
		for i := 0; i < 10; i++ { // four to a segment
			if err := q.Put(ctx, body); err != nil {
				t.Errorf("Put inside Empty: %v", err)
			}
		}
	}
	q = mustOpen(t, t.TempDir(), opts)
	defer q.Close()
	for i := 0; i < 3; i++ {
		q.Put(ctx, body)
	}
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, []byte("after")); err != nil {
		t.Fatalf("Put after Empty: %v", err)
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, q)
	if len(got) != 11 || string(got[10]) != "after" {
		t.Fatalf("after Empty: read %d records, want the 10 put inside it and 1 after", len(got))
	}
}

// TestPropertyRandomOps runs random puts, reads, acks, reopenings and
// rotations with retention, then checks every retained seq reads back
// what was put and every deleted one says ErrNotFound.
func TestPropertyRandomOps(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("SPILLQ_SEED"), 10, 64); err == nil {
		seed = s // to run a failure's seed again
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 700, RetainBytes: 3000, NoSync: true}
	q := mustOpen(t, dir, opts)
	ctx := context.Background()
	var bodies [][]byte
	var inflight []uint64
	for step := 0; step < 3000; step++ {
		switch op := rng.IntN(10); {
		case op < 5:
			b := []byte(fmt.Sprintf("p%d-%s", len(bodies), bytes.Repeat([]byte{'z'}, rng.IntN(60))))
			if err := q.Put(ctx, b); err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, b)
		case op < 7:
			done, cancel := context.WithCancel(ctx)
			cancel()
			q.Sync(ctx)
			if rec, err := q.Read(done); err == nil {
				if !bytes.Equal(rec.Body, bodies[rec.Seq]) {
					t.Fatalf("Read seq %d: %q, want %q", rec.Seq, rec.Body, bodies[rec.Seq])
				}
				inflight = append(inflight, rec.Seq)
			}
		case op < 9 && len(inflight) > 0:
			k := rng.IntN(len(inflight))
			if err := q.Ack(inflight[k]); err != nil {
				t.Fatal(err)
			}
			inflight = append(inflight[:k], inflight[k+1:]...)
		case op == 9 && rng.IntN(20) == 0:
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q = mustOpen(t, dir, opts)
			inflight = nil
		}
	}
	q.Sync(ctx)
	first := q.Stats().FirstSeq
	for seq := range uint64(len(bodies)) {
		rec, err := q.ReadAt(seq)
		if seq < first {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted seq %d: got %v, want ErrNotFound", seq, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(rec.Body, bodies[seq]) {
			t.Fatalf("retained seq %d: got %q, %v; want %q", seq, rec.Body, err, bodies[seq])
		}
	}
	q.Close()
}

// tombstoneFixture leaves in dir segments 0 (records 0..2, 2 not
// acknowledged), 3 and 6 (acknowledged whole and deleted ahead of segment
// 0: tombstones) and 9 (records 9..11, acknowledged), the queue closed.
func tombstoneFixture(t *testing.T, dir string, opts Options) {
	t.Helper()
	ctx := context.Background()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	putFixed(t, q, 12)
	readAcking(t, q, 12, func(seq uint64) bool { return seq != 2 })
	if err := q.Sync(ctx); err != nil { // segments 3 and 6 become tombstones
		t.Fatal(err)
	}
	if st := q.Stats(); st.Segments != 2 || st.ReadSeq != 2 {
		t.Fatalf("%d segments on disk, read cursor %d; want 2 (0 and 9; 3 and 6 tombstones) and 2", st.Segments, st.ReadSeq)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDeletedSegmentLetGo: a segment deleted once every record of it is
// acknowledged is unmapped with the deletion, even when the cursor whose
// reader last read it is idle there: a mapping would keep the deleted
// file's blocks allocated.
func TestDeletedSegmentLetGo(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 16 << 10, NoSync: true})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 400; i++ {
		if err := q.Put(ctx, bytes.Repeat([]byte{'y'}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	first := q.Segments()[0]
	seg, _ := q.segmentFor(first.Base)
	f := seg.files.Load()
	for seq := first.Base; seq < first.End; seq++ {
		rec, err := q.Read(ctx)
		if err != nil || rec.Seq != seq {
			t.Fatalf("Read: seq %d, %v; want %d", rec.Seq, err, seq)
		}
		if err := q.Ack(seq); err != nil {
			t.Fatal(err)
		}
	}
	// The reader stays at the segment's end until the next Read.
	if err := q.Sync(ctx); err != nil { // a writer round: the deletion
		t.Fatal(err)
	}
	for i := 0; len(q.Segments()) > 0 && q.Segments()[0].Base == first.Base; i++ {
		if i == 1000 {
			t.Fatal("the acknowledged segment was not deleted")
		}
		q.Sync(ctx)
	}
	if n := f.refs.Load(); n != 0 {
		t.Fatalf("the deleted segment's files have %d holders, want none (unmapped)", n)
	}
	rec, err := q.Read(ctx)
	if err != nil || rec.Seq != first.End {
		t.Fatalf("Read after the deletion: seq %d, %v; want %d", rec.Seq, err, first.End)
	}
}
