package nsqbridge_test

import (
	"context"
	"testing"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/nsqbridge"
)

// BenchmarkPublish: 100-byte messages into one nsqd, through the bridge
// (local spillq queue with its default sync policy, fsync every 2500
// records, then forwarded in MPUB batches) against go-nsq's producer
// publishing each message directly. Each iteration is one message that
// nsqd has acknowledged by the end of the timing.
//
//	go test ./nsqbridge -run '^$' -bench Publish -count 6
func BenchmarkPublish(b *testing.B) {
	body := make([]byte, 100)
	nsqd := startNSQD(b)
	b.Run("impl=bridge", func(b *testing.B) {
		p, err := nsqbridge.OpenPublisher(b.TempDir(), nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, Topic: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		ctx := context.Background()
		b.SetBytes(100)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.Publish(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("impl=go-nsq-direct", func(b *testing.B) {
		prod, err := nsq.NewProducer(nsqd.TCP, nsq.NewConfig())
		if err != nil {
			b.Fatal(err)
		}
		defer prod.Stop()
		prod.SetLogger(nil, nsq.LogLevelError)
		b.SetBytes(100)
		b.ReportAllocs()
		for b.Loop() {
			if err := prod.Publish("bench", body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
