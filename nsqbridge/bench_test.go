package nsqbridge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/nsqbridge"
)

// BenchmarkPublish: 100-byte messages into 1 or 2 nsqd nodes (default
// options, started afresh for each run), in the same run:
//
//   - impl=bridge-accept times Publish alone: the message is in the local
//     spillq queue (fsync every 2500 records or 2 s) and not yet
//     forwarded. Not "delivered to nsqd".
//   - impl=bridge-acked times Publish of b.N messages and then Sync, which
//     returns once nsqd acknowledged all of them: the end-to-end rate.
//   - impl=go-nsq-publish and impl=go-nsq-multipublish time go-nsq's
//     Producer.Publish (one message per round trip) and MultiPublish
//     (batches of 100, the bridge's BatchSize), both acknowledged by nsqd
//     when they return; with 2 nodes, one goroutine and producer per node,
//     as the bridge runs one forwarder per node.
//
// The loops are b.N loops, not b.Loop, because bridge-acked's Sync after
// the last Publish belongs in the timed region.
//
//	go test ./nsqbridge -run '^$' -bench Publish -count 6
func BenchmarkPublish(b *testing.B) {
	body := make([]byte, 100)
	ctx := context.Background()
	for _, nodes := range []int{1, 2} {
		start := func(b *testing.B) []string {
			addrs := make([]string, nodes)
			for i := range addrs {
				addrs[i] = startNSQD(b).TCP
			}
			return addrs
		}
		openBridge := func(b *testing.B) *nsqbridge.Publisher {
			p, err := nsqbridge.OpenPublisher(b.TempDir(), nsqbridge.PublisherOptions{NSQD: start(b), Topic: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			return p
		}
		b.Run(fmt.Sprintf("nodes=%d/impl=bridge-accept", nodes), func(b *testing.B) {
			p := openBridge(b)
			for i := 0; i < b.N; i++ {
				if err := p.Publish(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			p.Close() // the rest stays local; forwarding it is another figure
		})
		b.Run(fmt.Sprintf("nodes=%d/impl=bridge-acked", nodes), func(b *testing.B) {
			p := openBridge(b)
			defer p.Close()
			for i := 0; i < b.N; i++ {
				if err := p.Publish(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		})
		for _, batch := range []int{1, 100} {
			name := "go-nsq-publish"
			if batch > 1 {
				name = "go-nsq-multipublish"
			}
			b.Run(fmt.Sprintf("nodes=%d/impl=%s", nodes, name), func(b *testing.B) {
				addrs := start(b)
				prods := make([]*nsq.Producer, len(addrs))
				for i, addr := range addrs {
					prod, err := nsq.NewProducer(addr, nsq.NewConfig())
					if err != nil {
						b.Fatal(err)
					}
					prod.SetLogger(nil, nsq.LogLevelError)
					if err := prod.Ping(); err != nil {
						b.Fatal(err)
					}
					defer prod.Stop()
					prods[i] = prod
				}
				bodies := make([][]byte, batch)
				for i := range bodies {
					bodies[i] = body
				}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for i, prod := range prods {
					share := b.N / len(prods)
					if i == 0 {
						share += b.N % len(prods)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for left := share; left > 0; left -= batch {
							var err error
							if batch == 1 {
								err = prod.Publish("bench", body)
							} else {
								err = prod.MultiPublish("bench", bodies[:min(batch, left)])
							}
							if err != nil {
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
}
