package spillq_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/spillq/spillq"
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
