package channel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/spillq/spillq/channel"
)

// Benchmarks of the channel's memory path, each shaped to isolate one
// cost. Compare variants with benchstat, or on a noisy machine by running
// compiled test binaries in turn:
//
//	go test -c -o /tmp/a.test ./channel  # once per variant
//	/tmp/a.test -test.run '^$' -test.bench . -test.cpu 2,8 -test.count 1

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

// BenchmarkReceiveFinishParallel: GOMAXPROCS goroutines each put,
// receive and finish, so deliveries and finishes of different messages
// run at the same moment (run with -cpu 2,8: more goroutines than cores
// also shows a lock holder being descheduled).
func BenchmarkReceiveFinishParallel(b *testing.B) {
	c := newBenchChannel(b)
	ctx := context.Background()
	body := make([]byte, 100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Put(ctx, body); err != nil {
				b.Error(err)
				return
			}
			m, err := c.Receive(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if err := m.Finish(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
