package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
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

// An operator's tool lists a queue's dead letters while the service that
// owns the queue runs: ListDeadLetters reads the store through a read-only
// view, taking no lock.
func ExampleListDeadLetters() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// The service: it fails a job, which goes to its dead-letter store.
	q, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if err := q.Put(ctx, []byte("resize img-7.png")); err != nil {
		log.Fatal(err)
	}
	m, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m.Fail(errors.New("no such file"))

	// The tool, with the queue still open.
	store := filepath.Join(dir, spillq.DeadDir) // a topic channel's: DIR/channels/NAME/dead
	for dl, err := range spillq.ListDeadLetters(ctx, store, spillq.DeadFilter{}) {
		if errors.Is(err, diskqueue.ErrCorrupt) || errors.Is(err, spillq.ErrNotDeadLetter) {
			fmt.Println("damaged:", err) // reported; the listing goes on
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q %s: %s\n", dl.Body, dl.Reason, dl.Error)
	}
	// Output:
	// "resize img-7.png" failed: channel: message failed: no such file
}
