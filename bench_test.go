package spillq_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/diskqueue/godq"
	"github.com/spillq/spillq/internal/procstat"
)

// Benchmarks of the wired channel, side by side with its floor (a bare Go
// chan) and its peers (the same channel over go-diskqueue, and nsqd's own
// memory-or-backend loop over go-diskqueue). Each iteration is one message
// put, received and finished.
//
//	go test -run '^$' -bench 'MemoryPath|SpillPath' -count 6 .

type benchMsg struct {
	body []byte
	id   uint64
}

// BenchmarkMemoryPath: put -> receive -> finish through memory. With
// work=0 the consumers do nothing, so the one producer is the bottleneck and
// a second consumer cannot add throughput on two cores; with work=crc the
// consumers checksum the body 40 times per message (about a microsecond, no
// clock reads), the shape of a real worker, and the question is whether the
// channel lets two of them run side by side.
func BenchmarkMemoryPath(b *testing.B) {
	body := make([]byte, 100)
	works := []struct {
		name string
		fn   func([]byte)
	}{
		{"0", func([]byte) {}},
		{"crc", func(b []byte) {
			for range 40 {
				if crc32.ChecksumIEEE(b) == 1 { // never: keeps the work, shares no cache line
					benchSink.Add(1)
				}
			}
		}},
	}
	for _, work := range works {
		for _, consumers := range []int{1, 2} {
			b.Run(fmt.Sprintf("work=%s/consumers=%d/impl=channel", work.name, consumers), func(b *testing.B) {
				c, err := channel.New(channel.Options{MemQueueSize: 1024})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ctx := context.Background()
				runPipeline(b, consumers,
					func() error { return c.Put(ctx, body) },
					receiveFinish(ctx, c, work.fn))
			})
			b.Run(fmt.Sprintf("work=%s/consumers=%d/impl=barechan", work.name, consumers), func(b *testing.B) {
				ch := make(chan *benchMsg, 1024)
				runPipeline(b, consumers,
					func() error { ch <- &benchMsg{body: body}; return nil },
					func() error { work.fn((<-ch).body); return nil })
			})
		}
	}
}

// benchSink keeps the compiler from dropping benchmark work.
var benchSink atomic.Uint64

// BenchmarkSpillPath: every message through the disk (MemQueueSize 0).
func BenchmarkSpillPath(b *testing.B) {
	body := make([]byte, 100)
	ctx := context.Background()
	nop := func(godiskqueue.LogLevel, string, ...interface{}) {}
	b.Run("size=100/impl=spillq", func(b *testing.B) {
		q, err := spillq.Open(b.TempDir(), spillq.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		runPipeline(b, 1,
			func() error { return q.Put(ctx, body) },
			receiveFinish(ctx, q, nil))
	})
	b.Run("size=100/impl=channel-over-godiskqueue", func(b *testing.B) {
		dq := godiskqueue.New("bench", b.TempDir(), 100<<20, 0, 1<<20, 2500, 2*time.Second, nop)
		c, err := channel.New(channel.Options{Backend: godq.ChannelBackend(dq)})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		runPipeline(b, 1,
			func() error { return c.Put(ctx, body) },
			receiveFinish(ctx, c, nil))
	})
	// nsqd's channel as closely as it runs in-process: put selects the
	// memory chan or encodes to go-diskqueue (mem-queue-size 0 sends all to
	// disk), and the consumer selects either; no in-flight tracking.
	b.Run("size=100/impl=nsqd-loop", func(b *testing.B) {
		dq := godiskqueue.New("bench", b.TempDir(), 100<<20, 0, 1<<20, 2500, 2*time.Second, nop)
		defer dq.Close()
		var mem chan *benchMsg // nil: mem-queue-size 0
		var id uint64
		runPipeline(b, 1,
			func() error {
				id++
				m := &benchMsg{body: body, id: id}
				select {
				case mem <- m:
					return nil
				default:
					buf := make([]byte, 8+len(body))
					binary.BigEndian.PutUint64(buf, m.id)
					copy(buf[8:], m.body)
					return dq.Put(buf)
				}
			},
			func() error {
				select {
				case <-mem:
				case b := <-dq.ReadChan():
					_ = &benchMsg{id: binary.BigEndian.Uint64(b), body: b[8:]}
				}
				return nil
			})
	})
}

// BenchmarkSpillDrain: Receive and Finish of messages already on disk
// (page cache warm) through spillq.Open with its defaults (impl=spillq),
// beside the disk layer's own Read and Ack of as many records of the same
// size (impl=diskqueue), in the same run: the channel's cost over the log
// it reads. impl=spillq-maxattempts is impl=spillq with MaxAttempts 5,
// which writes a delivery journal record per delivery and acknowledges it
// at Finish (channel.Options.Deliveries).
//
//	go test -run '^$' -bench SpillDrain -count 6 -benchtime 1000000x .
func BenchmarkSpillDrain(b *testing.B) {
	body := make([]byte, 100)
	ctx := context.Background()
	for _, attempts := range []uint16{0, 5} {
		name := "size=100/impl=spillq"
		if attempts > 0 {
			name += "-maxattempts"
		}
		b.Run(name, func(b *testing.B) {
			q, err := spillq.Open(b.TempDir(), spillq.Options{MaxAttempts: attempts})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			benchDrain(b, len(body), func() error { return q.Put(ctx, body) }, func() error {
				m, err := q.Receive(ctx)
				if err != nil {
					return err
				}
				return m.Finish()
			})
		})
	}
	b.Run("size=100/impl=diskqueue", func(b *testing.B) {
		q, err := diskqueue.Open(b.TempDir(), diskqueue.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		benchDrain(b, len(body), func() error { return q.Put(ctx, body) }, func() error {
			rec, err := q.Read(ctx)
			if err != nil {
				return err
			}
			return q.Ack(rec.Seq)
		})
	})
}

// benchDrain stores b.N records with put, untimed, then times b.N takes.
func benchDrain(b *testing.B, size int, put, take func() error) {
	for range b.N {
		if err := put(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := procstat.CPUTime()
	for range b.N {
		if err := take(); err != nil {
			b.Fatal(err)
		}
	}
	// The CPU every thread spent (the pump's, the log's writer's too): on
	// a shared machine a steadier figure than the wall clock's.
	if cpu >= 0 {
		b.ReportMetric(float64(procstat.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// receiveFinish is the consumer side of a pipeline: take one message, do
// work on its body (if work is not nil) and finish it.
func receiveFinish(ctx context.Context, r channel.Receiver, work func([]byte)) func() error {
	return func() error {
		m, err := r.Receive(ctx)
		if err != nil {
			return err
		}
		if work != nil {
			work(m.Body)
		}
		return m.Finish()
	}
}

// runPipeline runs one producer calling put b.N times and consumers
// calling get until b.N messages are through.
func runPipeline(b *testing.B, consumers int, put, get func() error) {
	b.SetBytes(100)
	b.ReportAllocs()
	var wg sync.WaitGroup
	per := b.N / consumers
	b.ResetTimer()
	cpu := procstat.CPUTime()
	for c := 0; c < consumers; c++ {
		n := per
		if c == 0 {
			n += b.N % consumers
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if err := get(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		if err := put(); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	// As benchDrain's: every thread's CPU, steadier than the wall clock
	// on a shared machine.
	if cpu >= 0 {
		b.ReportMetric(float64(procstat.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkRequeueDelay: Receive and Requeue with a delay (a retry with
// backoff) of messages on disk, through spillq.Open with its defaults, by
// 1 and by 8 consumers: each moves its message to the timer store; its old
// record is acknowledged in the background once the timer store has made
// the new one durable (one fsync for the moves of up to 2 ms), so the
// Requeue does not wait for an fsync.
//
//	go test -run '^$' -bench RequeueDelay -count 6 -benchtime 20000x .
func BenchmarkRequeueDelay(b *testing.B) {
	body := make([]byte, 100)
	ctx := context.Background()
	for _, consumers := range []int{1, 8} {
		b.Run(fmt.Sprintf("consumers=%d", consumers), func(b *testing.B) {
			q, err := spillq.Open(b.TempDir(), spillq.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			for range b.N {
				if err := q.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range consumers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						m, err := q.Receive(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if err := m.Requeue(time.Hour); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
