package nsqbridge_test

import (
	"context"
	"log"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/nsqbridge"
)

// A producer publishes through a local store-and-forward queue, and a
// worker written against channel.Receiver consumes from nsqd. The example
// has no Output comment, so go test compiles it but does not run it: it
// needs a running nsqd (and nsqlookupd) at the addresses below. The
// package's tests start real ones on loopback.
func Example() {
	ctx := context.Background()

	// Publish returns once the message is in the local queue (here fsynced:
	// SyncEvery 1); it is forwarded to nsqd in order, and removed locally
	// only once nsqd acknowledged it. While nsqd is down, Publish goes on
	// working into the local queue.
	pub, err := nsqbridge.OpenPublisher("/var/lib/myservice/outbox", nsqbridge.PublisherOptions{
		NSQD:  "127.0.0.1:4150",
		Topic: "jobs",
		Disk:  diskqueue.Options{SyncEvery: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(ctx, []byte("resize image 42")); err != nil {
		log.Fatal(err)
	}

	// The consumer is a channel.Receiver, as a *spillq.Queue is: moving a
	// worker from the embedded queue to nsqd changes only this line.
	var jobs channel.Receiver
	cons, err := nsqbridge.NewConsumer(nsqbridge.ConsumerOptions{
		Topic: "jobs", Channel: "workers", Lookupd: []string{"127.0.0.1:4161"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	jobs = cons
	runWorker(ctx, jobs)
}

// runWorker is a worker that runs unchanged against spillq or nsqd.
func runWorker(ctx context.Context, jobs channel.Receiver) {
	for {
		m, err := jobs.Receive(ctx)
		if err != nil {
			return // the consumer was closed, or ctx ended
		}
		log.Printf("working on %s", m.Body) // the work
		m.Finish()                          // Finish, Requeue and Touch go to nsqd
	}
}
