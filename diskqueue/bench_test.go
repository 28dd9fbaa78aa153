package diskqueue_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue"
)

// The benchmarks run spillq and github.com/nsqio/go-diskqueue side by side
// in the same process, plus the floors the hardware sets (a raw sequential
// file write, a raw write+fsync loop). Compare with benchstat; the tables of
// docs/performance.md and bench/results.md come from
//
//	go run -C cmd/bench .   (the whole matrix, with the report in bench/)
//
// Both queues use nsqd's defaults unless a benchmark says otherwise:
// 100 MiB segments, fsync every 2500 records or 2 s.

var benchSizes = []int{16, 100, 1024, 65536}

func nopLog(godiskqueue.LogLevel, string, ...interface{}) {}

func newPeer(b *testing.B, syncEvery int64) godiskqueue.Interface {
	b.Helper()
	return godiskqueue.New("bench", b.TempDir(), 100<<20, 0, 1<<20, syncEvery, 2*time.Second, nopLog)
}

func newSpillq(b *testing.B, opts diskqueue.Options) *diskqueue.Queue {
	b.Helper()
	q, err := diskqueue.Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// BenchmarkPut measures Put of one body size. The spillq figure and the
// raw floors include a final fsync of everything written, inside the
// timing: spillq's fsyncs otherwise run on its writer goroutine beside
// the producer, untimed at the end, while the raw loop waits for its own.
// go-diskqueue has no call that waits for its fsync; its figure has none.
func BenchmarkPut(b *testing.B) {
	for _, size := range benchSizes {
		body := make([]byte, size)
		b.Run(fmt.Sprintf("size=%d/impl=spillq", size), func(b *testing.B) {
			q := newSpillq(b, diskqueue.Options{})
			defer q.Close()
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := q.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			if err := q.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		})
		b.Run(fmt.Sprintf("size=%d/impl=godiskqueue", size), func(b *testing.B) {
			q := newPeer(b, 2500)
			defer q.Close()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Put(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("size=%d/impl=rawfile", size), func(b *testing.B) {
			benchRawWrite(b, size, 0)
		})
		// The same bytes under the sync policy both queues run here
		// (nsqd's fsync every 2500 records): the floor for that policy.
		b.Run(fmt.Sprintf("size=%d/impl=rawfile-sync2500", size), func(b *testing.B) {
			benchRawWrite(b, size, 2500)
		})
	}
}

// benchRawWrite is the physical floor: length-prefixed frames appended to a
// file in 1 MiB writes, fsynced every syncEvery frames (each one written on
// its own when syncEvery is 1) and at the end.
func benchRawWrite(b *testing.B, size, syncEvery int) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	frame := make([]byte, 4+size)
	binary.BigEndian.PutUint32(frame, uint32(size))
	buf := make([]byte, 0, 1<<20)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for range b.N {
		buf = append(buf, frame...)
		n++
		sync := syncEvery > 0 && n%syncEvery == 0
		if sync || len(buf) >= 1<<20 {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			buf = buf[:0]
		}
		if sync {
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := f.Write(buf); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}

// BenchmarkDrain measures reading (and acknowledging) records that are
// already on disk, page cache warm, both queues with their default sync
// policy. go-diskqueue counts reads toward its syncEvery, so its drain
// fsyncs its read position (and the data file) every 2,500 reads, inside
// the timing; spillq's acknowledgements are bits in a mapped file, which
// the writer fsyncs on its own schedule.
func BenchmarkDrain(b *testing.B) {
	const size = 100
	body := make([]byte, size)
	b.Run("size=100/impl=spillq", func(b *testing.B) {
		q := newSpillq(b, diskqueue.Options{})
		defer q.Close()
		ctx := context.Background()
		for i := 0; i < b.N; i++ {
			if err := q.Put(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
		if err := q.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rec, err := q.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := q.Ack(rec.Seq); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("size=100/impl=godiskqueue", func(b *testing.B) {
		q := newPeer(b, 2500)
		defer q.Close()
		for i := 0; i < b.N; i++ {
			if err := q.Put(body); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			<-q.ReadChan()
		}
	})
}

// BenchmarkPutGet runs one producer and one consumer at once; each
// iteration is one record through the queue.
func BenchmarkPutGet(b *testing.B) {
	const size = 100
	body := make([]byte, size)
	b.Run("size=100/impl=spillq", func(b *testing.B) {
		q := newSpillq(b, diskqueue.Options{})
		defer q.Close()
		ctx := context.Background()
		runPutGet(b, size,
			func() error { return q.Put(ctx, body) },
			func() error {
				rec, err := q.Read(ctx)
				if err != nil {
					return err
				}
				return q.Ack(rec.Seq)
			})
	})
	b.Run("size=100/impl=godiskqueue", func(b *testing.B) {
		q := newPeer(b, 2500)
		defer q.Close()
		runPutGet(b, size,
			func() error { return q.Put(body) },
			func() error { <-q.ReadChan(); return nil })
	})
}

// runPutGet runs b.N puts in this goroutine against b.N gets in another.
func runPutGet(b *testing.B, size int64, put, get func() error) {
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < b.N; i++ {
			if err := get(); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	for i := 0; i < b.N; i++ {
		if err := put(); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
}

// BenchmarkSyncEveryRecord puts 100-byte records with an fsync per record
// from 1 and from 16 producers. spillq's Put returns after its fsync and
// concurrent Puts share one (group commit); go-diskqueue with syncEvery 1
// fsyncs once per record on its loop after answering Put. rawfsync is a
// single writer's write+fsync loop.
func BenchmarkSyncEveryRecord(b *testing.B) {
	body := make([]byte, 100)
	for _, producers := range []int{1, 16} {
		b.Run(fmt.Sprintf("producers=%d/impl=spillq", producers), func(b *testing.B) {
			q := newSpillq(b, diskqueue.Options{SyncEvery: 1})
			defer q.Close()
			ctx := context.Background()
			syncs := q.Stats().Syncs
			runProducers(b, producers, func() error { return q.Put(ctx, body) })
			// How many records share an fsync (group commit).
			b.ReportMetric(float64(b.N)/float64(max(q.Stats().Syncs-syncs, 1)), "records/fsync")
		})
		b.Run(fmt.Sprintf("producers=%d/impl=godiskqueue", producers), func(b *testing.B) {
			q := newPeer(b, 1)
			defer q.Close()
			runProducers(b, producers, func() error { return q.Put(body) })
		})
	}
	b.Run("producers=1/impl=rawfsync", func(b *testing.B) { benchRawWrite(b, 100, 1) })
}

// runProducers splits b.N puts across n goroutines.
func runProducers(b *testing.B, n int, put func() error) {
	b.SetBytes(100)
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for p := 0; p < n; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := put(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkOpen measures Open (recovery included) of a queue holding 10
// thousand and 10 million 100-byte records: Open reads only the tail of
// the last segment, so the two should cost about the same.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{10_000, 10_000_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			q, err := diskqueue.Open(dir, diskqueue.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			body := make([]byte, 100)
			for i := 0; i < n; i++ {
				if err := q.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			if err := q.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				q, err := diskqueue.Open(dir, diskqueue.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if q.Depth() != int64(n) {
					b.Fatalf("Depth %d, want %d", q.Depth(), n)
				}
				q.Close()
			}
		})
	}
}

// BenchmarkCursors puts 100-byte records into one log read by N cursors at
// once, each with its own consumer (Read + Ack): the time per record until
// every cursor has acknowledged it, and per delivery (ns/op over N). Each
// record is written once whatever N (TestCursorsEachSeeTheirRecords); each
// cursor adds its reads and one bit per record.
func BenchmarkCursors(b *testing.B) {
	body := make([]byte, 100)
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("cursors=%d", n), func(b *testing.B) {
			l, err := diskqueue.OpenLog(b.TempDir(), diskqueue.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			cursors := make([]*diskqueue.Cursor, n)
			for i := range cursors {
				if cursors[i], err = l.Cursor(fmt.Sprintf("c%d", i), diskqueue.FromNext()); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range cursors {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						rec, err := c.Read(ctx)
						if err == nil {
							err = c.Ack(rec.Seq)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			for i := 0; i < b.N; i++ {
				if err := l.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/delivery")
		})
	}
}
