package spillq_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/procstat"
)

// The worker's cost: n messages stored on disk (spillq.Open, default
// options, untimed), then drained by 8 goroutines with a no-op job, by a
// hand-written Receive/Finish loop (impl=loop) and by a Worker with
// Concurrency 8 (impl=worker, its lease keeper on). Both acknowledge every
// message (Finish: its bit in the kernel), so the difference is the
// worker's own: the handler call, its panic guard, the attempt's clock
// reads and histogram, the slot the keeper looks at.
const workerBenchConcurrency = 8

// fillQueue opens a queue in a new directory and puts n 100-byte messages.
func fillQueue(b *testing.B, n int) *spillq.Queue {
	q, err := spillq.Open(b.TempDir(), spillq.Options{})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 100)
	for range n {
		if err := q.Put(context.Background(), body); err != nil {
			b.Fatal(err)
		}
	}
	return q
}

// drainLoop drains n messages from q by hand: workerBenchConcurrency
// goroutines of Receive and Finish.
func drainLoop(b *testing.B, q *spillq.Queue, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range workerBenchConcurrency {
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
				if done.Add(1) == int64(n) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
}

// drainWorker drains n messages from q through a Worker.
func drainWorker(b *testing.B, q *spillq.Queue, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	w, err := spillq.NewWorker(q, func(context.Context, *spillq.Message) error {
		if done.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, spillq.WorkerOptions{Concurrency: workerBenchConcurrency})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		b.Fatal(err)
	}
	if st := w.Stats(); st.Finished != int64(n) {
		b.Fatalf("finished %d of %d", st.Finished, n)
	}
}

// BenchmarkWorkerDrain: each side on its own, b.N messages.
//
//	go test -run '^$' -bench WorkerDrain -count 9 -benchtime 200000x .
func BenchmarkWorkerDrain(b *testing.B) {
	for _, impl := range []struct {
		name  string
		drain func(*testing.B, *spillq.Queue, int)
	}{{"loop", drainLoop}, {"worker", drainWorker}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			q := fillQueue(b, b.N)
			defer q.Close()
			b.SetBytes(100)
			b.ReportAllocs()
			b.ResetTimer()
			impl.drain(b, q, b.N)
		})
	}
}

// BenchmarkWorkerRatio: the two sides alternated in one process, so the
// machine's load as it changes falls on both alike: each iteration is one
// round, 50,000 messages drained by each side in turn (the order reversed
// every other round); the figures are the medians over the rounds of the
// worker's time over the loop's, wall and CPU (every thread).
//
//	go test -run '^$' -bench WorkerRatio -benchtime 9x .
func BenchmarkWorkerRatio(b *testing.B) {
	const n = 50_000
	var wall, cpu []float64
	for r := range b.N {
		var w, c [2]time.Duration // loop, worker
		for j := range 2 {
			i := j
			if r%2 == 1 {
				i = 1 - j
			}
			b.StopTimer()
			q := fillQueue(b, n)
			b.StartTimer()
			began, cpuBegan := time.Now(), procstat.CPUTime()
			if i == 0 {
				drainLoop(b, q, n)
			} else {
				drainWorker(b, q, n)
			}
			w[i], c[i] = time.Since(began), procstat.CPUTime()-cpuBegan
			b.StopTimer()
			q.Close()
			b.StartTimer()
		}
		wall = append(wall, float64(w[1])/float64(w[0]))
		cpu = append(cpu, float64(c[1])/float64(c[0]))
	}
	median := func(x []float64) float64 {
		slices.Sort(x)
		if len(x)%2 == 1 {
			return x[len(x)/2]
		}
		return (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	b.ReportMetric(median(wall), "worker/loop-wall")
	b.ReportMetric(median(cpu), "worker/loop-cpu")
}
