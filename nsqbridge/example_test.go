package nsqbridge_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/nsqbridge"
)

// A publisher over the nsqd nodes registered with nsqlookupd, with a
// dead-letter handler for what nsqd refuses. (Not run: it needs a
// cluster.)
func ExampleOpenPublisher() {
	pub, err := nsqbridge.OpenPublisher("/var/lib/orders/outbox", nsqbridge.PublisherOptions{
		Lookupd: []string{"nsqlookupd:4161"},
		Topic:   "orders",
		DeadLetter: func(m nsqbridge.Rejected, reason error) {
			log.Printf("nsqd refused message %d for %s: %v", m.Seq, m.Topic, reason)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close() // what nsqd has not acknowledged waits on disk for the next start

	ctx := context.Background()
	if err := pub.Publish(ctx, []byte(`{"order":1}`)); errors.Is(err, nsqbridge.ErrMessageTooLarge) {
		log.Print("too large for nsqd; not stored")
	}
	pub.PublishTo(ctx, "audit", []byte(`order 1 placed`))
	pub.DeferredPublish(ctx, "reminders", 10*time.Minute, []byte(`order 1: pay`))

	// Wait until nsqd has acknowledged all three.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pub.Sync(ctx); err != nil {
		log.Printf("not yet at nsqd (still safe locally): %v; %d pending", err, pub.Stats().Pending)
	}
}

// A worker written against channel.Receiver, reading from nsqd with a
// channel's attempt and dead-letter rules. (Not run: it needs a cluster.)
func ExampleNewConsumer() {
	var jobs channel.Receiver
	c, err := nsqbridge.NewConsumer(nsqbridge.ConsumerOptions{
		Topic: "orders", Channel: "billing", Lookupd: []string{"nsqlookupd:4161"},
		MaxAttempts: 5,
		DeadLetter: func(m *channel.Message, reason error) error {
			log.Printf("giving up on %s after %d attempts: %v", m.ID, m.Attempts, reason)
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	jobs = c
	for {
		m, err := jobs.Receive(context.Background())
		if err != nil {
			return
		}
		if err := bill(m.Body); err != nil {
			m.Requeue(time.Second) // after the 5th attempt: DeadLetter
			continue
		}
		if err := m.Finish(); errors.Is(err, channel.ErrNotInFlight) {
			log.Print("finished after MsgTimeout: nsqd delivers it again")
		}
	}
}

func bill([]byte) error { return nil }
