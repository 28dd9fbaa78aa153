package spillq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spillq/spillq"
)

// A service's work queue: jobs go in as JSON, a worker pool runs them with
// retries, a job that can never work is dead-lettered at once, and the
// worker stops gracefully when its ctx ends (here: once three jobs ended;
// in a service, at SIGTERM).
func ExampleNewWorker() {
	dir, err := os.MkdirTemp("", "spillq-worker")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ended := make(chan string, 3) // what became of each job
	q, err := spillq.Open(dir, spillq.Options{
		MaxAttempts: 5,
		DeadLetter: func(m *spillq.Message, reason error) error {
			ended <- fmt.Sprintf("dead letter %s: %v", m.Body, reason)
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	type email struct{ To string }
	send := func(ctx context.Context, m *spillq.Message) error {
		var e email
		if err := json.Unmarshal(m.Body, &e); err != nil {
			return spillq.Permanent(err) // no retry mends a bad body
		}
		if m.Attempts == 1 && e.To == "b@example.com" {
			return fmt.Errorf("smtp: try again later") // retried after a backoff
		}
		ended <- fmt.Sprintf("sent to %s on attempt %d", e.To, m.Attempts)
		return nil
	}
	w, err := spillq.NewWorker(q, send, spillq.WorkerOptions{
		Concurrency: 4,
		Timeout:     30 * time.Second,
		Backoff:     spillq.ExponentialBackoff(10*time.Millisecond, time.Second),
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	for _, job := range []string{`{"To":"a@example.com"}`, `{"To":"b@example.com"}`, `not json`} {
		if err := q.Put(ctx, []byte(job)); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(ctx)
	var results []string
	go func() {
		for range 3 {
			results = append(results, <-ended)
		}
		stop()
	}()
	if err := w.Run(ctx); err != nil { // returns once stopped and every job taken is answered
		log.Fatal(err)
	}
	slices.Sort(results) // the jobs ran side by side
	fmt.Println(strings.Join(results, "\n"))
	// Output:
	// dead letter not json: channel: message failed: invalid character 'o' in literal null (expecting 'u')
	// sent to a@example.com on attempt 1
	// sent to b@example.com on attempt 2
}

// A service stops its workers at SIGTERM: Run stops taking jobs, gives the
// running ones ShutdownTimeout to finish, and gives back unspent those it
// had to cut short, for the next run of the service.
func ExampleWorker_Run_signals() {
	q, err := spillq.Open(os.TempDir()+"/spillq-example-signals", spillq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	w, err := spillq.NewWorker(q, func(ctx context.Context, m *spillq.Message) error {
		return nil // the job
	}, spillq.WorkerOptions{ShutdownTimeout: 20 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Print(err)
	}
}
