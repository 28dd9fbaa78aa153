package diskqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

func openQueue(t testing.TB, dir string, opts diskqueue.Options) *diskqueue.Queue {
	t.Helper()
	q, err := diskqueue.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return q
}

func body(i int) []byte { return []byte(fmt.Sprintf("record-%06d", i)) }

// putter is a Queue or a Log; consumer is a Queue or a Cursor.
type (
	putter interface {
		Put(context.Context, []byte) error
	}
	consumer interface {
		Read(context.Context) (diskqueue.Record, error)
		Ack(uint64) error
	}
)

func putN(t testing.TB, q putter, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := q.Put(context.Background(), body(i)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
}

// readN reads n records, checks they carry bodies from..from+n in order and
// acknowledges them unless ack is false.
func readN(t testing.TB, q consumer, from, n int, ack bool) []diskqueue.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []diskqueue.Record
	for i := from; i < from+n; i++ {
		rec, err := q.Read(ctx)
		if err != nil {
			t.Fatalf("Read %d: %v", i, err)
		}
		if !bytes.Equal(rec.Body, body(i)) {
			t.Fatalf("Read: got %q, want %q", rec.Body, body(i))
		}
		if ack {
			if err := q.Ack(rec.Seq); err != nil {
				t.Fatalf("Ack %d: %v", rec.Seq, err)
			}
		}
		out = append(out, rec)
	}
	return out
}

func TestPutReadAck(t *testing.T) {
	q := openQueue(t, t.TempDir(), diskqueue.Options{})
	defer q.Close()
	putN(t, q, 0, 100)
	if got := q.Depth(); got != 100 {
		t.Fatalf("Depth: got %d, want 100", got)
	}
	recs := readN(t, q, 0, 100, true)
	for i, r := range recs {
		if r.Seq != uint64(i) {
			t.Fatalf("record %d: got seq %d", i, r.Seq)
		}
	}
	if got := q.Depth(); got != 0 {
		t.Fatalf("Depth after acks: got %d, want 0", got)
	}
}

func TestOutOfOrderAcks(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, dir, diskqueue.Options{})
	putN(t, q, 0, 10)
	recs := readN(t, q, 0, 10, false)
	for _, i := range []int{9, 3, 1, 2, 5} {
		if err := q.Ack(recs[i].Seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Ack(recs[3].Seq); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Fatalf("double Ack: got %v, want ErrNotInFlight", err)
	}
	if err := q.Ack(100); !errors.Is(err, diskqueue.ErrNotInFlight) {
		t.Fatalf("Ack of unread seq: got %v, want ErrNotInFlight", err)
	}
	if got := q.Stats().ReadSeq; got != 0 {
		t.Fatalf("ReadSeq with 0 unacked: got %d, want 0", got)
	}
	if err := q.Ack(recs[0].Seq); err != nil {
		t.Fatal(err)
	}
	if got := q.Stats().ReadSeq; got != 4 {
		t.Fatalf("ReadSeq: got %d, want 4", got)
	}
	q.Close()
	q = openQueue(t, dir, diskqueue.Options{})
	defer q.Close()
	// Exactly 4, 6, 7 and 8 were never acknowledged: the acknowledgements
	// of 5 and 9, above the oldest unacknowledged record, survive too.
	for _, want := range []uint64{4, 6, 7, 8} {
		rec, err := q.Read(context.Background())
		if err != nil || rec.Seq != want {
			t.Fatalf("Read after reopen: got seq %d (%v), want %d", rec.Seq, err, want)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth after the unacknowledged came back: %d", d)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if rec, err := q.Read(done); err == nil {
		t.Fatalf("an acknowledged record came back: seq %d", rec.Seq)
	}
}

// TestAckCounts acknowledges records in orders that take each way the read
// cursor moves (over one record, over a run acknowledged out of order,
// across segment ends) and checks ReadSeq and Depth after every Ack, and
// what a reopen delivers again.
func TestAckCounts(t *testing.T) {
	orders := map[string]func(n int) []int{
		"in order": func(n int) []int {
			o := make([]int, n)
			for i := range o {
				o[i] = i
			}
			return o
		},
		"pairs swapped": func(n int) []int {
			o := make([]int, n)
			for i := range o {
				o[i] = i ^ 1
			}
			return o
		},
		"reversed": func(n int) []int {
			o := make([]int, n)
			for i := range o {
				o[i] = n - 1 - i
			}
			return o
		},
		"odd then even": func(n int) []int {
			var o []int
			for i := 1; i < n; i += 2 {
				o = append(o, i)
			}
			for i := 0; i < n; i += 2 {
				o = append(o, i)
			}
			return o
		},
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			const n = 60
			dir := t.TempDir()
			// About seven records a segment: the cursor crosses segment ends.
			q := openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 256, NoSync: true})
			putN(t, q, 0, n)
			readN(t, q, 0, n, false)
			acked := make([]bool, n)
			o := order(n)
			for k, i := range o {
				if err := q.Ack(uint64(i)); err != nil {
					t.Fatalf("Ack %d: %v", i, err)
				}
				acked[i] = true
				floor, depth := n, 0
				for j := n - 1; j >= 0; j-- {
					if !acked[j] {
						floor, depth = j, depth+1
					}
				}
				if st := q.Stats(); st.ReadSeq != uint64(floor) || st.Depth != int64(depth) {
					t.Fatalf("after Ack %d: ReadSeq %d, Depth %d; want %d, %d", i, st.ReadSeq, st.Depth, floor, depth)
				}
				if err := q.Ack(uint64(i)); !errors.Is(err, diskqueue.ErrNotInFlight) {
					t.Fatalf("second Ack %d: got %v, want ErrNotInFlight", i, err)
				}
				if k == n/2 {
					// Half way: what a reopen delivers is exactly what is
					// not acknowledged yet.
					if err := q.Close(); err != nil {
						t.Fatal(err)
					}
					q = openQueue(t, dir, diskqueue.Options{MaxSegmentBytes: 256, NoSync: true})
					for j := range n {
						if acked[j] {
							continue
						}
						rec, err := q.Read(context.Background())
						if err != nil || rec.Seq != uint64(j) {
							t.Fatalf("Read after reopen: seq %d (%v), want %d", rec.Seq, err, j)
						}
					}
				}
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadAt(t *testing.T) {
	q := openQueue(t, t.TempDir(), diskqueue.Options{MaxSegmentBytes: 4096})
	defer q.Close()
	putN(t, q, 0, 1000)
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 99, 500, 998, 999} {
		rec, err := q.ReadAt(uint64(i))
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", i, err)
		}
		if !bytes.Equal(rec.Body, body(i)) || rec.Seq != uint64(i) {
			t.Fatalf("ReadAt(%d): got seq %d %q", i, rec.Seq, rec.Body)
		}
	}
	if _, err := q.ReadAt(1000); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Fatalf("ReadAt past end: got %v, want ErrNotFound", err)
	}
}

func TestConcurrentPutRead(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	q := openQueue(t, t.TempDir(), diskqueue.Options{MaxSegmentBytes: 64 << 10})
	defer q.Close()
	const producers, each = 8, 2000
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := q.Put(context.Background(), []byte(fmt.Sprintf("%d-%d", p, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := make(map[string]bool)
	var mu sync.Mutex
	var rg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for c := 0; c < 4; c++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				mu.Lock()
				done := len(seen) == producers*each
				mu.Unlock()
				if done {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				rec, err := q.Read(rctx)
				rcancel()
				if err != nil {
					if ctx.Err() != nil {
						t.Error(err)
						return
					}
					continue
				}
				mu.Lock()
				if seen[string(rec.Body)] {
					t.Errorf("duplicate %s", rec.Body)
				}
				seen[string(rec.Body)] = true
				mu.Unlock()
				if err := q.Ack(rec.Seq); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rg.Wait()
	if q.Depth() != 0 {
		t.Fatalf("Depth: got %d, want 0", q.Depth())
	}
	_ = os.Getpid
}
