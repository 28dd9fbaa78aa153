package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// A job that cannot be done is failed; it waits in the queue's dead-letter
// store with why, where an operator lists it and, once the bug is fixed,
// redrives it: it comes back with its ID, on its first attempt.
func ExampleDeadLetters() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := spillq.Open(dir, spillq.Options{MaxAttempts: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if err := q.Put(ctx, []byte(`{"user": 42`)); err != nil {
		log.Fatal(err)
	}
	m, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m.Fail(errors.New("unexpected end of JSON input"))

	dead := q.DeadLetters()
	for dl, err := range dead.List(ctx, spillq.DeadFilter{}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s after %d attempt(s): %s\n", dl.Reason, dl.Attempts, dl.Error)
	}
	n, err := dead.Redrive(ctx, spillq.DeadFilter{IDs: []channel.ID{m.ID}})
	if err != nil {
		log.Fatal(err)
	}
	again, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "redriven; same ID:", again.ID == m.ID, "attempt", again.Attempts, "left:", dead.Len())
	again.Finish()
	// Output:
	// failed after 1 attempt(s): channel: message failed: unexpected end of JSON input
	// 1 redriven; same ID: true attempt 1 left: 0
}
