package channel_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// A channel with a small memory buffer spills the rest of a burst to its
// backend, here spillq's disk log, and delivers everything in put order.
func ExampleChannel() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	disk, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// The channel owns the backend from here on: its Close closes it.
	c, err := channel.New(channel.Options{MemQueueSize: 3, Backend: spillq.DiskBackend(disk)})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		c.Put(ctx, []byte(fmt.Sprintf("job %d", i)))
	}
	st := c.Stats()
	fmt.Printf("memory %d/%d, spilled to disk %d\n", st.MemoryDepth, st.MemoryBound, st.Spills)
	for c.Depth() > 0 {
		m, _ := c.Receive(ctx)
		fmt.Println(string(m.Body))
		m.Finish()
	}
	// Output:
	// memory 3/3, spilled to disk 2
	// job 1
	// job 2
	// job 3
	// job 4
	// job 5
}

// A worker pool: each worker receives, works, and finishes; Close at the
// end stops them.
func Example_workerPool() {
	c, _ := channel.New(channel.Options{MemQueueSize: 100})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		c.Put(ctx, []byte("resize"))
	}
	var done sync.WaitGroup
	done.Add(10)
	var mu sync.Mutex
	handled := 0
	for w := 0; w < 3; w++ {
		go func() {
			for {
				m, err := c.Receive(ctx)
				if errors.Is(err, channel.ErrClosed) {
					return
				}
				mu.Lock()
				handled++ // the work
				mu.Unlock()
				m.Finish()
				done.Done()
			}
		}()
	}
	done.Wait()
	c.Close()
	fmt.Println("handled", handled)
	// Output: handled 10
}

// Graceful shutdown: on a signal (here, a cancelled context) workers stop
// taking messages, and Close writes what is left, in flight included, to the
// backend for the next start.
func Example_gracefulShutdown() {
	dir, err := os.MkdirTemp("", "spillq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	disk, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	c, _ := channel.New(channel.Options{MemQueueSize: 10, Backend: spillq.DiskBackend(disk)})
	for i := 0; i < 4; i++ {
		c.Put(context.Background(), []byte(fmt.Sprintf("job %d", i)))
	}
	ctx, stop := context.WithCancel(context.Background())
	started := make(chan struct{})
	var workers sync.WaitGroup
	workers.Add(1)
	go func() {
		defer workers.Done()
		for ctx.Err() == nil {
			m, err := c.Receive(ctx)
			if err != nil {
				return
			}
			close(started)
			<-ctx.Done() // the signal arrives mid-job: m is never finished
			_ = m
		}
	}()
	<-started
	stop()
	workers.Wait()
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	// The next start finds them on disk.
	disk, err = diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer disk.Close()
	fmt.Println("kept for the next start:", disk.Depth())
	// Output: kept for the next start: 4
}

// Requeue with backoff: a failing job comes back after a delay that doubles
// with each attempt, until MaxAttempts sends it to the dead-letter handler.
func Example_requeueWithBackoff() {
	c, _ := channel.New(channel.Options{
		MemQueueSize: 10,
		MaxAttempts:  3,
		DeadLetter: func(m *channel.Message, reason error) error {
			fmt.Printf("dead letter after %d attempts: %v\n", m.Attempts, reason)
			return nil
		},
	})
	defer c.Close()
	ctx := context.Background()
	c.Put(ctx, []byte("flaky job"))
	for {
		m, err := c.Receive(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("attempt", m.Attempts, "failed")
		m.Requeue(time.Millisecond << m.Attempts) // 2 ms, 4 ms, ...
		if m.Attempts == 3 {
			break
		}
	}
	// Output:
	// attempt 1 failed
	// attempt 2 failed
	// attempt 3 failed
	// dead letter after 3 attempts: channel: message exceeded its delivery attempts
}
