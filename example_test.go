package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// Open a queue, work one message, and stop with one still waiting in the
// memory buffer: Close writes it to disk, and the next Open delivers it.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	q, err := spillq.Open(dir, spillq.Options{
		MemQueueSize: 100,                             // up to 100 messages wait in memory
		Disk:         diskqueue.Options{SyncEvery: 1}, // a spilled message is fsynced before Put returns
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, job := range []string{"resize image 1", "resize image 2"} {
		if err := q.Put(ctx, []byte(job)); err != nil {
			log.Fatal(err)
		}
	}
	m, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worked:", string(m.Body))
	m.Finish()
	if err := q.Close(); err != nil { // "resize image 2" goes to disk
		log.Fatal(err)
	}

	q, err = spillq.Open(dir, spillq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	m, err = q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the restart:", string(m.Body))
	m.Finish()
	// Output:
	// worked: resize image 1
	// after the restart: resize image 2
}

// Two channels read one topic: each message is written to the log once
// and delivered to both. A channel created later starts where it is told,
// here at the oldest message still on disk.
func ExampleOpenTopic() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	t, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	billing, err := t.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, order := range []string{"order 1", "order 2"} {
		if err := t.Put(ctx, []byte(order)); err != nil {
			log.Fatal(err)
		}
	}
	analytics, err := t.Channel("analytics", spillq.ChannelOptions{Start: diskqueue.FromOldest()})
	if err != nil {
		log.Fatal(err)
	}
	for _, ch := range []struct {
		name string
		c    channel.Receiver
	}{{"billing", billing}, {"analytics", analytics}} {
		for range 2 {
			m, err := ch.c.Receive(ctx)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(ch.name+":", string(m.Body))
			m.Finish()
		}
	}
	fmt.Println("records in the log:", t.Log().Stats().WriteSeq)
	// Output:
	// billing: order 1
	// billing: order 2
	// analytics: order 1
	// analytics: order 2
	// records in the log: 2
}

// Latest wins: under KeyReplace a Put supersedes the pending message with
// its key, consumers see only the newest version, and Compact takes the
// superseded ones off the disk (the queue also does it by itself, see
// Options.CompactDirtyRatio).
func ExampleQueue_Compact() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	q, err := spillq.Open(dir, spillq.Options{
		Keys: channel.KeyReplace,
		Disk: diskqueue.Options{MaxSegmentBytes: 4 << 10}, // small, to have sealed segments
	})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	for v := range 100 {
		price := fmt.Sprintf("price of item 7: %d", 100+v)
		if err := q.PutWith(ctx, []byte(price), channel.PutOptions{Key: []byte("item-7")}); err != nil {
			log.Fatal(err)
		}
	}
	// The superseded versions in sealed segments go from the disk now;
	// the channel drops the others unseen. Each counts once.
	if _, err := q.Compact(ctx); err != nil {
		log.Fatal(err)
	}
	m, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(m.Body))
	m.Finish()
	fmt.Println("superseded:", q.Stats().Superseded)
	// Output:
	// price of item 7: 199
	// superseded: 99
}

// A topic's key policy decides at Put for every channel: under KeyUnique a
// key is refused while some channel has not finished its message.
func ExampleTopicOptions_keys() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	t, err := spillq.OpenTopic(dir, spillq.TopicOptions{Keys: channel.KeyUnique})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	billing, err := t.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		log.Fatal(err)
	}
	audit, err := t.Channel("audit", spillq.ChannelOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	job := channel.PutOptions{Key: []byte("invoice-42")}
	put := func() {
		err := t.PutWith(ctx, []byte("send invoice 42"), job)
		fmt.Println("put:", err == nil, errors.Is(err, channel.ErrDuplicate))
	}
	put()
	put() // both channels have it pending
	m, err := billing.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m.Finish()
	put() // audit still has it
	if m, err = audit.Receive(ctx); err != nil {
		log.Fatal(err)
	}
	m.Finish()
	put() // every channel is done with it
	// Output:
	// put: true false
	// put: false true
	// put: false true
	// put: true false
}

// An idempotent producer: each job carries the client's key for it (an
// Idempotency-Key header, say), and under KeyDedup the retry of a job the
// queue already has (its first Put timed out, or returned ErrNotDurable)
// is refused with the ID of the job stored, which the producer answers
// with, as for the first Put. The Put runs under a context of the
// service's own: one that a client going away would cancel could end a
// Put that had already stored the job.
func ExampleQueue_Enqueue() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := spillq.Open(dir, spillq.Options{Keys: channel.KeyDedup})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	enqueue := func(reqCtx context.Context, body, key string) (channel.ID, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(reqCtx), 5*time.Second)
		defer cancel()
		r, err := q.Enqueue(ctx, []byte(body), channel.PutOptions{Key: []byte(key)})
		var dup *channel.DuplicateError
		if errors.As(err, &dup) {
			return dup.ID, nil // put before: the same job
		}
		if err != nil {
			return 0, err
		}
		fmt.Printf("stored: logged %v, seq %d\n", r.Logged, r.Seq)
		return r.ID, nil
	}
	ctx := context.Background()
	first, err := enqueue(ctx, "charge order 42", "order-42")
	if err != nil {
		log.Fatal(err)
	}
	again, err := enqueue(ctx, "charge order 42", "order-42") // the client's retry
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the retry names the same job:", again == first)
	m, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("delivered %q, the job named: %v; left: %d\n", m.Body, m.ID == first, q.Depth())
	m.Finish()
	// Output:
	// stored: logged true, seq 0
	// the retry names the same job: true
	// delivered "charge order 42", the job named: true; left: 0
}
