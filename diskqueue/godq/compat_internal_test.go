package godq

import (
	"strconv"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue"
)

// TestCompatReadsAheadInBatches: a backlog goes from the reader to the
// pump in batches, not a channel send per record, which cost a drain a
// second goroutine hand-off per record.
func TestCompatReadsAheadInBatches(t *testing.T) {
	const n = 1000
	dq := newCompat("q", t.TempDir(), 1<<20, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {}, nil)
	defer dq.Close()
	body := make([]byte, 100)
	for i := range n {
		copy(body, strconv.Itoa(i)+" ")
		if err := dq.Put(body); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		b := <-dq.ReadChan()
		if want := strconv.Itoa(i) + " "; string(b[:len(want)]) != want {
			t.Fatalf("record %d starts %q", i, b[:len(want)])
		}
	}
	// While the Puts ran the reader took records as they came, in two
	// batches (one the pump holds, one waiting for it); after them every
	// batch is full.
	if got := dq.(*compatQueue).batches.Load(); got > n/32 {
		t.Fatalf("%d records came to the pump in %d batches", n, got)
	}
}

// TestBatchLen: a batch holds about batchBytes of bodies, at least one
// record and at most maxBatch.
func TestBatchLen(t *testing.T) {
	recs := func(n, size int) []diskqueue.Record {
		r := make([]diskqueue.Record, n)
		for i := range r {
			r[i].Body = make([]byte, size)
		}
		return r
	}
	for _, c := range []struct {
		n, size, want int
	}{
		{0, 0, maxBatch},
		{1, 0, maxBatch},
		{64, 100, maxBatch},
		{4, 16 << 10, 4},
		{1, 1 << 20, 1},
		{2, 1 << 20, 1},
	} {
		if got := batchLen(recs(c.n, c.size)); got != c.want {
			t.Errorf("after %d records of %d bytes: %d, want %d", c.n, c.size, got, c.want)
		}
	}
}
