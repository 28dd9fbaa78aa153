package channel_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spillq/spillq/channel"
)

// Benchmarks of the channel's memory path, each shaped to isolate one
// cost. Compare variants with benchstat, or on a noisy machine by running
// compiled test binaries in turn:
//
//	go test -c -o /tmp/a.test ./channel  # once per variant
//	/tmp/a.test -test.run '^$' -test.bench Pipeline -test.count 1

// newBenchChannel returns a memory-only channel, closed when b ends.
func newBenchChannel(b *testing.B) *channel.Channel {
	b.Helper()
	c, err := channel.New(channel.Options{MemQueueSize: 1024})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkBacklog: one goroutine puts, receives and finishes, with
// backlog messages waiting ahead of each one it receives. Nothing runs
// beside it, so it measures the work of one message through memory, clock
// reads included: Put's timestamp, the delivery's deadline (Channel.now),
// Finish's latency. With backlog=0 every finish is timed; with 512, one in
// 8 (see recordLatency).
func BenchmarkBacklog(b *testing.B) {
	for _, backlog := range []int{0, 512} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			c := newBenchChannel(b)
			ctx := context.Background()
			body := make([]byte, 100)
			for range backlog {
				if err := c.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
				m, err := c.Receive(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Finish(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPipeline: one producer goroutine puts while consumer
// goroutines receive and finish, so the producer's and the consumers'
// writes to the channel land on different cores. With work=crc each
// consumer checksums the body 40 times between Receive and Finish (about
// a microsecond), so consumers, not the producer, set the pace, and two of
// them deliver and finish side by side.
func BenchmarkPipeline(b *testing.B) {
	for _, work := range []string{"0", "crc"} {
		for _, consumers := range []int{1, 2} {
			b.Run(fmt.Sprintf("work=%s/consumers=%d", work, consumers), func(b *testing.B) {
				c := newBenchChannel(b)
				ctx := context.Background()
				body := make([]byte, 100)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				var wg sync.WaitGroup
				for i := range consumers {
					n := b.N / consumers
					if i == 0 {
						n += b.N % consumers
					}
					wg.Go(func() {
						var sum uint32
						for range n {
							m, err := c.Receive(ctx)
							if err != nil {
								b.Error(err)
								return
							}
							if work == "crc" {
								for range 40 {
									sum += crc32.ChecksumIEEE(m.Body)
								}
							}
							if err := m.Finish(); err != nil {
								b.Error(err)
								return
							}
						}
						benchSink.Add(sum)
					})
				}
				for range b.N {
					if err := c.Put(ctx, body); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
			})
		}
	}
}

// benchSink keeps the compiler from dropping the consumers' work.
var benchSink atomic.Uint32
