package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestLoad runs many producers and consumers at once through memory and
// disk, with consumers that requeue some messages and abandon others (which
// then time out). At the end every message put has been finished exactly
// once, and the counters balance. SPILLQ_LOAD_MESSAGES sets the size
// (default 16,000).
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	total := 16_000
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_LOAD_MESSAGES")); err == nil {
		total = n
	}
	const producers, consumers = 8, 8
	q, err := spillq.Open(t.TempDir(), spillq.Options{
		MemQueueSize: 200,
		MsgTimeout:   100 * time.Millisecond,
		Disk:         diskqueue.Options{MaxSegmentBytes: 64 << 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var finished sync.Map // body -> true
	var nFinished, requeued, abandoned atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < total; i += producers {
				if err := q.Put(ctx, []byte(fmt.Sprintf("m%07d", i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	var cwg sync.WaitGroup
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for {
				m, err := q.Receive(ctx)
				if err != nil {
					select {
					case <-done:
					default:
						if !errors.Is(err, channel.ErrClosed) {
							t.Error(err)
						}
					}
					return
				}
				switch r := rng.IntN(100); {
				case r < 5 && m.Attempts < 4:
					abandoned.Add(1) // never finished: it times out
				case r < 15 && m.Attempts < 4:
					// Counted only if it was still in flight: held past
					// MsgTimeout (a stall under -race on a loaded
					// machine), it timed out, and Requeue refuses it.
					if m.Requeue(time.Duration(rng.IntN(5))*time.Millisecond) == nil {
						requeued.Add(1)
					}
				default:
					if err := m.Finish(); err != nil {
						continue // timed out while held: it comes again
					}
					if _, dup := finished.LoadOrStore(string(m.Body), true); dup {
						t.Errorf("%s finished twice", m.Body)
					}
					if nFinished.Add(1) == int64(total) {
						close(done)
						cancel()
					}
				}
			}
		}()
	}
	wg.Wait()
	cwg.Wait()
	if got := nFinished.Load(); got != int64(total) {
		t.Fatalf("finished %d of %d", got, total)
	}
	for i := 0; i < total; i++ {
		if _, ok := finished.Load(fmt.Sprintf("m%07d", i)); !ok {
			t.Fatalf("m%07d never finished", i)
		}
	}
	st := q.Stats()
	if st.Puts != int64(total) || st.Finishes != int64(total) || st.Requeues != requeued.Load() || st.Timeouts < abandoned.Load() {
		t.Fatalf("counters do not balance: %+v (requeued %d, abandoned %d)", st, requeued.Load(), abandoned.Load())
	}
	if st.InFlight != 0 || q.Depth() != 0 {
		t.Fatalf("left over: in flight %d, depth %d", st.InFlight, q.Depth())
	}
	t.Logf("%d messages, %d spilled, %d requeued, %d abandoned and timed out (%d timeouts)", total, st.Spills, requeued.Load(), abandoned.Load(), st.Timeouts)
}
