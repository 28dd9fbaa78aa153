package channel_test

import (
	"context"
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
