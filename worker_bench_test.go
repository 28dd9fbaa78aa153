package spillq_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// BenchmarkWorkerDrain: b.N messages stored on disk (spillq.Open, default
// options, untimed), then drained by 8 goroutines with a no-op job: a
// hand-written Receive/Finish loop (impl=loop) against a Worker with
// Concurrency 8 (impl=worker, its lease keeper on), in the same run. Both
// acknowledge every message (Finish: its bit in the kernel), so the
// difference is the worker's own cost: the handler call, its panic guard,
// the attempt's clock reads and histogram, the slot the keeper looks at.
//
//	go test -run '^$' -bench WorkerDrain -count 9 -benchtime 200000x .
func BenchmarkWorkerDrain(b *testing.B) {
	const workers = 8
	body := make([]byte, 100)
	fill := func(b *testing.B) *spillq.Queue {
		q, err := spillq.Open(b.TempDir(), spillq.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for range b.N {
			if err := q.Put(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		return q
	}
	b.Run("impl=loop", func(b *testing.B) {
		q := fill(b)
		defer q.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var done atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					m, err := q.Receive(ctx)
					if err != nil {
						return
					}
					if err := m.Finish(); err != nil {
						b.Error(err)
					}
					if done.Add(1) == int64(b.N) {
						cancel()
					}
				}
			}()
		}
		wg.Wait()
	})
	b.Run("impl=worker", func(b *testing.B) {
		q := fill(b)
		defer q.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var done atomic.Int64
		w, err := spillq.NewWorker(q, func(context.Context, *channel.Message) error {
			if done.Add(1) == int64(b.N) {
				cancel()
			}
			return nil
		}, spillq.WorkerOptions{Concurrency: workers})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		if err := w.Run(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if st := w.Stats(); st.Finished != int64(b.N) {
			b.Fatalf("finished %d of %d", st.Finished, b.N)
		}
	})
}
