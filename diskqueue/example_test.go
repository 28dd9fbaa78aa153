package diskqueue_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/spillq/spillq/diskqueue"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "spillq-example")
	defer os.RemoveAll(dir)

	// SyncEvery 1: Put returns once the record is on stable storage.
	q, err := diskqueue.Open(dir, diskqueue.Options{SyncEvery: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	ctx := context.Background()
	for _, job := range []string{"resize image 1", "resize image 2"} {
		if err := q.Put(ctx, []byte(job)); err != nil {
			log.Fatal(err)
		}
	}
	for q.Depth() > 0 {
		rec, err := q.Read(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("seq %d: %s\n", rec.Seq, rec.Body)
		// Until Ack, the record would be delivered again after a restart.
		if err := q.Ack(rec.Seq); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// seq 0: resize image 1
	// seq 1: resize image 2
}

func ExampleQueue_ReadAt() {
	dir, _ := os.MkdirTemp("", "spillq-example")
	defer os.RemoveAll(dir)
	// Keep up to 1 GiB of consumed segments for lookups and replay.
	q, err := diskqueue.Open(dir, diskqueue.Options{RetainBytes: 1 << 30})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		q.Put(ctx, []byte(fmt.Sprintf("order %d", i)))
	}
	q.Sync(ctx) // ReadAt sees written records

	// One index read and one log read, whatever the queue's size.
	rec, err := q.ReadAt(742)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", rec.Body)

	// Replay a range without touching the consumers' cursor.
	for rec, err := range q.Scan(998, 1000) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("replay %d: %s\n", rec.Seq, rec.Body)
	}
	// Output:
	// order 742
	// replay 998: order 998
	// replay 999: order 999
}

// Two consumer groups read one log: each record is stored once, each
// cursor sees all of them at its own pace, and a segment goes only when
// both have acknowledged it.
func ExampleLog_Cursor() {
	dir, _ := os.MkdirTemp("", "spillq-example")
	defer os.RemoveAll(dir)
	l, err := diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	billing, err := l.Cursor("billing", diskqueue.FromOldest())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, order := range []string{"order 1", "order 2"} {
		if err := l.Put(ctx, []byte(order)); err != nil {
			log.Fatal(err)
		}
	}
	// A cursor created later starts where it is told: here, at the oldest
	// record still on disk, so it sees the orders put before it existed.
	audit, err := l.Cursor("audit", diskqueue.FromOldest())
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range []*diskqueue.Cursor{billing, audit} {
		for c.Depth() > 0 {
			rec, err := c.Read(ctx)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s: seq %d %s\n", c.Name(), rec.Seq, rec.Body)
			if err := c.Ack(rec.Seq); err != nil {
				log.Fatal(err)
			}
		}
	}
	fmt.Println(l.Cursors())
	// Output:
	// billing: seq 0 order 1
	// billing: seq 1 order 2
	// audit: seq 0 order 1
	// audit: seq 1 order 2
	// [audit billing]
}

// A batch is stored as consecutive records, and with SyncEvery 1 it waits
// for one fsync rather than one per record.
func ExampleLog_PutBatch() {
	dir, _ := os.MkdirTemp("", "spillq-example")
	defer os.RemoveAll(dir)
	q, err := diskqueue.Open(dir, diskqueue.Options{SyncEvery: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	ctx := context.Background()
	batch := [][]byte{[]byte("debit A"), []byte("credit B"), []byte("log transfer")}
	n, err := q.PutBatch(ctx, batch)
	if err != nil {
		// n records (a prefix of batch) were stored all the same.
		log.Fatalf("stored %d of %d: %v", n, len(batch), err)
	}
	for q.Depth() > 0 {
		rec, err := q.Read(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("seq %d: %s\n", rec.Seq, rec.Body)
		q.Ack(rec.Seq)
	}
	fmt.Println("fsyncs:", q.Stats().Syncs)
	// Output:
	// seq 0: debit A
	// seq 1: credit B
	// seq 2: log transfer
	// fsyncs: 1
}

// A consumer that works in batches takes the records ready with one call
// (and one acquisition of the cursor's lock), then acknowledges each.
func ExampleQueue_ReadBatch() {
	dir, _ := os.MkdirTemp("", "spillq-example")
	defer os.RemoveAll(dir)
	q, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	ctx := context.Background()
	for _, b := range []string{"a", "b", "c", "d", "e"} {
		if err := q.Put(ctx, []byte(b)); err != nil {
			log.Fatal(err)
		}
	}
	batch := make([]diskqueue.Record, 3)
	for q.Depth() > 0 {
		n, err := q.ReadBatch(ctx, batch)
		if err != nil {
			log.Fatal(err)
		}
		for _, rec := range batch[:n] {
			fmt.Printf("%s ", rec.Body)
			q.Ack(rec.Seq)
		}
		fmt.Println("| batch of", n)
	}
	// Output:
	// a b c | batch of 3
	// d e | batch of 2
}
