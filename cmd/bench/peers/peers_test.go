// Package peers benchmarks spillq's disk queue against embedded Go queues
// whose dependencies spillq's own module should not carry: today
// github.com/grandecola/bigqueue (mmap arenas, no checksums), the fastest
// of them, and, as a job queue under spillq's Worker, NATS JetStream with
// its server embedded (jetstream_test.go, which states both sides'
// promises). Each benchmark runs both queues in the same process, one
// after the other, so their ratio is what to read on a noisy machine.
//
// What each side promises when its Put returns (the report, cmd/bench,
// prints it next to every figure):
//
//   - spillq (default options): the record is in the kernel (copied into a
//     mapped, preallocated segment), so it survives a crash of the
//     process; fsync every 2500 records or 2 s; every record checksummed;
//     Read hands a record out and Ack, recorded in the kernel at once,
//     removes it, so a consumer crash redelivers exactly what it had not
//     acknowledged.
//   - bigqueue (its periodic flush turned off): the record is in the
//     kernel (copied into a mapped arena), so it survives a crash of the
//     process; never fsynced; no checksums; Dequeue removes the record as
//     it returns it, so a consumer crash loses what it held. Its defaults
//     msync every arena every second and every million enqueues and
//     dequeues, under the queue's lock: left on, that flush landed inside
//     the timed part (a drain of 1,000,000 records set up by 1,000,000
//     Enqueues flushed at its first Dequeue) and made bigqueue look
//     slower than it is. Off, its figures are its fastest.
//   - spillq's channel (spillq.Open, default options, BenchmarkChannelPut):
//     a Put that spills (with the defaults, MemQueueSize 0, every one does)
//     promises what spillq's disk queue does, its record a message
//     envelope (ID, timestamp, attempts) around the body; a Put into the
//     memory buffer (MemQueueSize > 0 and room in it) is in the process
//     only, lost by a crash of it (Close writes it to disk).
//
// TestMain first touches and frees warmPages of memory: on this project's
// virtual machine the first touch of guest memory the host has not backed
// yet costs about 3 µs a page, against 0.2 µs once it has, so the
// benchmark that ran first (spillq's) paid for fresh memory and the one
// after it reused the pages the first had just freed.
package peers

import (
	"context"
	"flag"
	"os"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/grandecola/bigqueue"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
)

const size = 100

// warmPages is how much memory TestMain touches and frees before the
// benchmarks: more than the largest of them writes (1,000,000 records of
// about 130 bytes with spillq's framing and index).
const warmPages = 1 << 30

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		warm(warmPages) // not for a plain go test, which runs no benchmark
	}
	os.Exit(m.Run())
}

// warm writes a byte in each page of n bytes of fresh memory, then hands
// them back to the kernel (debug.FreeOSMemory returns the heap's free
// pages to it at once).
func warm(n int) {
	b := make([]byte, n)
	for i := 0; i < n; i += os.Getpagesize() {
		b[i] = 1
	}
	runtime.KeepAlive(b)
	b = nil
	debug.FreeOSMemory()
}

func openSpillq(b *testing.B) *diskqueue.Queue {
	b.Helper()
	q, err := diskqueue.Open(b.TempDir(), diskqueue.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

func openBigqueue(b *testing.B) *bigqueue.MmapQueue {
	b.Helper()
	q, err := bigqueue.NewMmapQueue(b.TempDir(), bigqueue.SetArenaSize(64<<20),
		bigqueue.SetPeriodicFlushOps(0), bigqueue.SetPeriodicFlushDuration(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

// BenchmarkPut times Put of 100-byte records into an empty queue.
func BenchmarkPut(b *testing.B) {
	body := make([]byte, size)
	b.Run("impl=spillq", func(b *testing.B) {
		settle()
		q := openSpillq(b)
		ctx := context.Background()
		b.SetBytes(size)
		for b.Loop() {
			if err := q.Put(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=bigqueue", func(b *testing.B) {
		settle()
		q := openBigqueue(b)
		b.SetBytes(size)
		for b.Loop() {
			if err := q.Enqueue(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDrain times taking records that are already stored, page cache
// warm: spillq's Read and Ack, bigqueue's Dequeue.
func BenchmarkDrain(b *testing.B) {
	body := make([]byte, size)
	b.Run("impl=spillq", func(b *testing.B) {
		settle()
		q := openSpillq(b)
		ctx := context.Background()
		for range b.N {
			if err := q.Put(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(size)
		b.ResetTimer()
		for range b.N {
			rec, err := q.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := q.Ack(rec.Seq); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=bigqueue", func(b *testing.B) {
		settle()
		q := openBigqueue(b)
		for range b.N {
			if err := q.Enqueue(body); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(size)
		b.ResetTimer()
		for range b.N {
			if _, err := q.Dequeue(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPutGet times one producer and one consumer running at once,
// per record through both. bigqueue has no blocking read: its consumer
// polls Dequeue, taking the queue's lock, while the queue is empty (on
// two cores, against the producer); spillq's Read waits for a record.
func BenchmarkPutGet(b *testing.B) {
	body := make([]byte, size)
	b.Run("impl=spillq", func(b *testing.B) {
		settle()
		q := openSpillq(b)
		ctx := context.Background()
		b.SetBytes(size)
		done := make(chan error, 1)
		b.ResetTimer()
		go func() {
			for range b.N {
				if err := q.Put(ctx, body); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for range b.N {
			rec, err := q.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := q.Ack(rec.Seq); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("impl=bigqueue", func(b *testing.B) {
		settle()
		q := openBigqueue(b)
		b.SetBytes(size)
		done := make(chan error, 1)
		b.ResetTimer()
		go func() {
			for range b.N {
				if err := q.Enqueue(body); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for got := 0; got < b.N; {
			if _, err := q.Dequeue(); err == nil {
				got++
			} else if err != bigqueue.ErrEmptyQueue {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkChannelPut times spillq's channel Put (spillq.Open) of 100-byte
// bodies beside bigqueue's Enqueue, in the channel's two regimes:
//
//   - regime=spill: the default options (MemQueueSize 0), so every Put
//     goes to the disk log, as every Put does under a backlog whatever the
//     buffer's size: what a Put rate under backlog means. Its promise is
//     the disk queue's (see the package comment).
//   - regime=memory: MemQueueSize 4096 and a consumer that never lets it
//     fill (it drains it, untimed, every 4096 Puts), so every Put goes to
//     the memory buffer, which a crash of the process loses.
//
// impl=bigqueue is Enqueue into an empty queue, as in BenchmarkPut.
func BenchmarkChannelPut(b *testing.B) {
	body := make([]byte, size)
	ctx := context.Background()
	b.Run("regime=spill/impl=spillq", func(b *testing.B) {
		settle()
		q, err := spillq.Open(b.TempDir(), spillq.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { q.Close() })
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Put(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
		if st := q.Stats(); st.Spills != st.Puts {
			b.Fatalf("%d of %d Puts spilled: the regime is not every Put to disk", st.Spills, st.Puts)
		}
	})
	b.Run("regime=memory/impl=spillq", func(b *testing.B) {
		settle()
		const buffer = 4096
		q, err := spillq.Open(b.TempDir(), spillq.Options{MemQueueSize: buffer})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { q.Close() })
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer() // settle and Open are not a Put's cost
		for i := range b.N {
			if i%buffer == 0 && i > 0 {
				b.StopTimer()
				for range buffer {
					m, err := q.Receive(ctx)
					if err != nil {
						b.Fatal(err)
					}
					m.Finish()
				}
				b.StartTimer()
			}
			if err := q.Put(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if st := q.Stats(); st.Spills != 0 {
			b.Fatalf("%d of %d Puts spilled: the regime is not every Put to memory", st.Spills, st.Puts)
		}
	})
	b.Run("impl=bigqueue", func(b *testing.B) {
		settle()
		q := openBigqueue(b)
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Enqueue(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
