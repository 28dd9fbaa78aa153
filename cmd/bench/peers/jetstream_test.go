package peers

// spillq's Worker against NATS JetStream as a job queue, both embedded in
// the benchmark's process: nats-server v2.15 with JetStream on, a
// WorkQueue-retention stream in file storage, one durable pull consumer
// with explicit acks, reached through the in-process connection (no
// socket). Each benchmark runs both sides in the same process, one after
// the other, so their ratio is what to read on a noisy machine.
//
// What each side has promised (the report prints it next to each figure):
//
//   - durability=kernel, the defaults of both. spillq (spillq.Open, default
//     options): a job is in the kernel when Put returns (a crash of the
//     process cannot lose it), fsynced every 2,500 records or 2 s; a
//     job's Finish, when the worker answers it, is a bit in the kernel.
//     JetStream (file storage, sync_interval left at its 2 minutes): a
//     job is in the kernel when its PubAck arrives (an R1 file store
//     writes in place, write(2), before it replies); an acknowledgement
//     that the server has processed writes the job's tombstone the same
//     way, so it too is in the kernel, fsynced every 2 minutes.
//   - durability=disk. spillq Disk.SyncEvery 1: a job is fsynced when Put
//     returns (Puts running together share an fsync); Finish is a bit in
//     the kernel, fsynced on the 2 s tick. JetStream SyncAlways: a job is
//     fsynced before its PubAck; so is each acknowledgement's tombstone,
//     before the server replies to it: on the ack side JetStream promises
//     more than spillq here.
//
// JetStream's acknowledgement comes in two kinds, both measured:
// impl=jetstream-acksync (DoubleAck: the call returns once the server has
// processed it, so an acked job is not redelivered after a crash, what
// spillq's Finish promises) and impl=jetstream-ack (Ack: fire and forget,
// JetStream's fastest; a crash just after it can redeliver the job). With
// Ack the clock runs until the server has removed every job, not just
// until the last Ack is sent: the server's work on an ack is the job's.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

const (
	// jobWorkers is spillq's Worker Concurrency and JetStream's fetching
	// goroutines.
	jobWorkers = 8
	// jobBatch is how many jobs one JetStream Fetch asks for.
	jobBatch   = 256
	jobSubject = "jobs"
)

// durabilities are the matched pairs the benchmarks run: the name in the
// benchmark, and whether each side fsyncs every job.
var durabilities = []struct {
	name string
	sync bool
}{{"kernel", false}, {"disk", true}}

// jetStream is an embedded nats-server and a client of it.
type jetStream struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
}

// startJetStream starts a nats-server with JetStream storing under a fresh
// directory, SyncAlways as asked, creates the job stream and its pull
// consumer, and connects to it in process. Cleanup stops it all.
func startJetStream(b *testing.B, syncAlways bool) *jetStream {
	b.Helper()
	s, err := server.NewServer(&server.Options{
		JetStream:  true,
		StoreDir:   b.TempDir(),
		DontListen: true,
		NoSigs:     true,
		NoLog:      true,
		SyncAlways: syncAlways,
	})
	if err != nil {
		b.Fatal(err)
	}
	s.Start()
	b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(jobBatch))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "JOBS",
		Subjects:  []string{jobSubject},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	})
	if err != nil {
		b.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       "workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 1 << 20,
		MaxWaiting:    4 * jobWorkers,
	})
	if err != nil {
		b.Fatal(err)
	}
	return &jetStream{nc: nc, js: js, cons: cons}
}

// publish publishes n jobs and returns once the server has acknowledged
// every one (up to jobBatch of them in flight).
func (j *jetStream) publish(n int, body []byte) error {
	futures := make([]jetstream.PubAckFuture, 0, jobBatch)
	wait := func() error {
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			}
		}
		futures = futures[:0]
		return nil
	}
	for range n {
		f, err := j.js.PublishAsync(jobSubject, body)
		if err != nil {
			return err
		}
		if futures = append(futures, f); len(futures) == jobBatch {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// drain runs jobWorkers goroutines that fetch jobs, run the no-op job and
// acknowledge them (DoubleAck when ackSync) until n have been, and returns
// then. Fetches still waiting then end within their short expiry.
func (j *jetStream) drain(b *testing.B, n int, ackSync bool) {
	var done atomic.Int64
	all := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range jobWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				batch, err := j.cons.Fetch(jobBatch, jetstream.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					b.Error(err)
					return
				}
				for m := range batch.Messages() {
					if ackSync {
						err = m.DoubleAck(ctx)
					} else {
						err = m.Ack()
					}
					if err != nil {
						b.Error(err)
						return
					}
					if done.Add(1) == int64(n) {
						close(all)
					}
				}
				if err := batch.Error(); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	select {
	case <-all:
	case <-b.Context().Done():
	}
	if !ackSync {
		// An Ack returns once sent: the server's work on it (the
		// tombstone's write, its fsync under SyncAlways) is still to come,
		// and is part of the job's cost, so the clock runs until the
		// server has removed every job.
		j.waitEmpty(b)
	}
	b.StopTimer()
	cancel()
	wg.Wait()
}

// waitEmpty waits until the stream holds no job: every one acknowledged
// and, a WorkQueue stream, removed. It fails b if that takes minutes.
func (j *jetStream) waitEmpty(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := j.js.Stream(context.Background(), "JOBS")
		if err != nil {
			b.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("stream holds %d jobs after the drain", info.State.Msgs)
		}
		time.Sleep(time.Millisecond)
	}
}

func openJobs(b *testing.B, syncEvery bool) *spillq.Queue {
	b.Helper()
	opts := spillq.Options{}
	if syncEvery {
		opts.Disk = diskqueue.Options{SyncEvery: 1}
	}
	q, err := spillq.Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

// putJobs puts n jobs from jobWorkers goroutines (so that, syncing every
// record, their Puts share fsyncs).
func putJobs(q *spillq.Queue, n int, body []byte) error {
	var wg sync.WaitGroup
	errs := make(chan error, jobWorkers)
	var next atomic.Int64
	for range jobWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := q.Put(context.Background(), body); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// work runs a Worker with Concurrency jobWorkers and a no-op handler over
// q until n jobs are finished; the timer stops when the last is.
func work(b *testing.B, q *spillq.Queue, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	w, err := spillq.NewWorker(q, func(context.Context, *channel.Message) error {
		if done.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, spillq.WorkerOptions{Concurrency: jobWorkers})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if st := w.Stats(); st.Finished != int64(n) {
		b.Fatalf("finished %d of %d", st.Finished, n)
	}
}

// BenchmarkJobsDrain: b.N jobs of 100 bytes enqueued (untimed), then
// drained by 8 workers running a no-op job and acknowledging it: spillq's
// Worker (Concurrency 8) against 8 goroutines each Fetching 256 jobs at a
// time from JetStream's pull consumer and acking each. A figure is the
// time per job, from the first take to the last acknowledgement; jobs/s
// is its inverse. The durability of each side is in the file's comment.
//
//	go test -run '^$' -bench 'JobsDrain/durability=kernel' -benchtime 20000x -count 5 ./peers
//	go test -run '^$' -bench 'JobsDrain/durability=disk' -benchtime 5000x -count 5 ./peers
func BenchmarkJobsDrain(b *testing.B) {
	body := make([]byte, size)
	for _, d := range durabilities {
		b.Run(fmt.Sprintf("durability=%s/impl=spillq-worker", d.name), func(b *testing.B) {
			settle()
			q := openJobs(b, d.sync)
			if err := putJobs(q, b.N, body); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			b.ResetTimer()
			work(b, q, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
		for _, ack := range []struct {
			impl string
			sync bool
		}{{"jetstream-acksync", true}, {"jetstream-ack", false}} {
			b.Run(fmt.Sprintf("durability=%s/impl=%s", d.name, ack.impl), func(b *testing.B) {
				settle()
				j := startJetStream(b, d.sync)
				if err := j.publish(b.N, body); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(size)
				b.ResetTimer()
				j.drain(b, b.N, ack.sync)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
				j.waitEmpty(b)
			})
		}
	}
}

// BenchmarkJobsEndToEnd: one producer enqueues b.N jobs of 100 bytes while
// 8 workers drain them with a no-op job, as in BenchmarkJobsDrain; a
// figure is the time per job from the first enqueue to the last
// acknowledgement. The producer waits for each job's acceptance: spillq's
// Put returns, JetStream's PubAck arrives (PublishAsync, 256 in flight,
// JetStream's fastest way to publish with its acks). Durability=kernel
// only: the defaults of both (see the file's comment).
//
//	go test -run '^$' -bench JobsEndToEnd -benchtime 20000x -count 5 ./peers
func BenchmarkJobsEndToEnd(b *testing.B) {
	body := make([]byte, size)
	b.Run("durability=kernel/impl=spillq-worker", func(b *testing.B) {
		settle()
		q := openJobs(b, false)
		b.SetBytes(size)
		b.ResetTimer()
		produced := make(chan error, 1)
		go func() {
			for range b.N {
				if err := q.Put(context.Background(), body); err != nil {
					produced <- err
					return
				}
			}
			produced <- nil
		}()
		work(b, q, b.N)
		if err := <-produced; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
	for _, ack := range []struct {
		impl string
		sync bool
	}{{"jetstream-acksync", true}, {"jetstream-ack", false}} {
		b.Run("durability=kernel/impl="+ack.impl, func(b *testing.B) {
			settle()
			j := startJetStream(b, false)
			b.SetBytes(size)
			b.ResetTimer()
			produced := make(chan error, 1)
			go func() { produced <- j.publish(b.N, body) }()
			j.drain(b, b.N, ack.sync)
			if err := <-produced; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			j.waitEmpty(b)
		})
	}
}
