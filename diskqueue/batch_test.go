package diskqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

func bodies(from, n int) [][]byte {
	var out [][]byte
	for i := from; i < from+n; i++ {
		out = append(out, body(i))
	}
	return out
}

// PutBatch stores its bodies in order as consecutive records, with one
// fsync for all of them under SyncEvery 1.
func TestPutBatch(t *testing.T) {
	for _, c := range []struct {
		name string
		opts diskqueue.Options
	}{{"sync1", diskqueue.Options{SyncEvery: 1}}, {"compress", diskqueue.Options{Compress: true}}, {"rotating", diskqueue.Options{MaxSegmentBytes: 512}}} {
		opts := c.opts
		t.Run(c.name, func(t *testing.T) {
			q := openQueue(t, t.TempDir(), opts)
			defer q.Close()
			ctx := context.Background()
			putN(t, q, 0, 3)
			before := q.Stats().Syncs
			n, err := q.PutBatch(ctx, bodies(3, 100))
			if n != 100 || err != nil {
				t.Fatalf("PutBatch: %d, %v; want 100, nil", n, err)
			}
			if opts.SyncEvery == 1 {
				if got := q.Stats().Syncs - before; got != 1 {
					t.Errorf("PutBatch of 100 with SyncEvery 1 took %d fsyncs, want 1", got)
				}
			}
			if n, err := q.PutBatch(ctx, nil); n != 0 || err != nil {
				t.Errorf("PutBatch of nothing: %d, %v; want 0, nil", n, err)
			}
			putN(t, q, 103, 1)
			if st := q.Stats(); st.WriteSeq != 104 || st.Depth != 104 {
				t.Fatalf("WriteSeq %d, Depth %d; want 104, 104", st.WriteSeq, st.Depth)
			}
			for i, rec := range readN(t, q, 0, 104, true) {
				if rec.Seq != uint64(i) {
					t.Fatalf("record %d has seq %d", i, rec.Seq)
				}
			}
			if !opts.Compress {
				return
			}
			big := bytes.Repeat([]byte("compressible "), 1000)
			used := q.Stats().DiskBytes
			if n, err := q.PutBatch(ctx, [][]byte{big, big}); n != 2 || err != nil {
				t.Fatalf("PutBatch: %d, %v", n, err)
			}
			if grew := q.Stats().DiskBytes - used; grew >= int64(len(big)) {
				t.Errorf("two compressible bodies of %d bytes took %d bytes", len(big), grew)
			}
			for seq := uint64(104); seq < 106; seq++ {
				if rec, err := q.ReadAt(seq); err != nil || !bytes.Equal(rec.Body, big) {
					t.Fatalf("ReadAt(%d) of a compressed batch record: %d bytes, %v", seq, len(rec.Body), err)
				}
			}
		})
	}
}

// A body out of limits anywhere in the batch stores none of it.
func TestPutBatchLimits(t *testing.T) {
	q := openQueue(t, t.TempDir(), diskqueue.Options{MaxRecordBytes: 64, MinRecordBytes: 2})
	defer q.Close()
	ctx := context.Background()
	for _, c := range []struct {
		bad  []byte
		want error
	}{{make([]byte, 65), diskqueue.ErrRecordTooLarge}, {[]byte("x"), diskqueue.ErrRecordTooSmall}} {
		batch := bodies(0, 10)
		batch[7] = c.bad
		if n, err := q.PutBatch(ctx, batch); n != 0 || !errors.Is(err, c.want) {
			t.Errorf("PutBatch with body 7 of %d bytes: %d, %v; want 0, %v", len(c.bad), n, err, c.want)
		}
	}
	if got := q.Stats().WriteSeq; got != 0 {
		t.Fatalf("WriteSeq %d after refused batches, want 0", got)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := q.PutBatch(ctx, bodies(0, 2)); n != 0 || !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("PutBatch after Close: %d, %v; want 0, ErrClosed", n, err)
	}
}

// When the disk budget fills midway the prefix stored stays and is
// counted; with BlockWhenFull the batch waits for a consumer and finishes.
func TestPutBatchDiskFull(t *testing.T) {
	opts := diskqueue.Options{MaxDiskBytes: 8 << 10, MaxSegmentBytes: 2 << 10}
	q := openQueue(t, t.TempDir(), opts)
	defer q.Close()
	ctx := context.Background()
	n, err := q.PutBatch(ctx, bodies(0, 10000))
	if !errors.Is(err, diskqueue.ErrDiskFull) || n == 0 || n >= 10000 {
		t.Fatalf("PutBatch past the budget: %d, %v; want some stored and ErrDiskFull", n, err)
	}
	if got := q.Stats().WriteSeq; got != uint64(n) {
		t.Fatalf("WriteSeq %d after PutBatch stored %d", got, n)
	}
	readN(t, q, 0, n, true)
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after reading the %d stored, want 0", d, n)
	}

	// The reader starts once the batch waits: started beside it, a reader
	// that kept pace let the batch through without once finding the disk
	// full (a busy CI machine).
	opts.BlockWhenFull = true
	waiting := make(chan struct{})
	var once sync.Once
	diskqueue.SetFullHook(&opts, func() { once.Do(func() { close(waiting) }) })
	q2 := openQueue(t, t.TempDir(), opts)
	defer q2.Close()
	done := make(chan error, 1)
	go func() {
		n, err := q2.PutBatch(ctx, bodies(0, 2000))
		if err == nil && n != 2000 {
			err = fmt.Errorf("stored %d of 2000", n)
		}
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("PutBatch of 2000 into an 8 KiB budget returned before waiting for space: %v", err)
	}
	readN(t, q2, 0, 2000, true) // frees the space the batch waits for
	if err := <-done; err != nil {
		t.Fatalf("blocking PutBatch: %v", err)
	}
	if st := q2.Stats(); st.RetriedWrites == 0 {
		t.Errorf("RetriedWrites = 0 after a batch that waited for space")
	}
}

// Batches and single Puts from several goroutines: every record is stored
// once, and each batch's records are consecutive and in order.
func TestPutBatchConcurrent(t *testing.T) {
	q := openQueue(t, t.TempDir(), diskqueue.Options{MaxSegmentBytes: 4 << 10, SyncEvery: 1})
	defer q.Close()
	ctx := context.Background()
	const batches, size, singles = 30, 17, 200
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for k := 0; k < batches; k++ {
				var batch [][]byte
				for j := 0; j < size; j++ {
					batch = append(batch, []byte(fmt.Sprintf("batch-%d-%d-%d", g, k, j)))
				}
				if n, err := q.PutBatch(ctx, batch); n != size || err != nil {
					t.Errorf("PutBatch: %d, %v", n, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for k := 0; k < singles; k++ {
				if err := q.Put(ctx, []byte(fmt.Sprintf("single-%d-%d", g, k))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	total := 2 * (batches*size + singles)
	recs := readN2(t, q, total)
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after reading the %d put, want 0", d, total)
	}
	for i := 0; i < len(recs); i++ {
		b := string(recs[i].Body)
		if !strings.HasPrefix(b, "batch-") {
			continue
		}
		var g, k, j int
		fmt.Sscanf(b, "batch-%d-%d-%d", &g, &k, &j)
		if j != 0 {
			t.Fatalf("seq %d: %s does not follow the rest of its batch", recs[i].Seq, b)
		}
		for j := 0; j < size; j++ {
			want := fmt.Sprintf("batch-%d-%d-%d", g, k, j)
			if i+j >= len(recs) || !bytes.Equal(recs[i+j].Body, []byte(want)) {
				t.Fatalf("seq %d: batch %d-%d interrupted: want %s", recs[i].Seq+uint64(j), g, k, want)
			}
		}
		i += size - 1
	}
}

// readN2 reads and acknowledges n records of any bodies.
func readN2(t *testing.T, q *diskqueue.Queue, n int) []diskqueue.Record {
	t.Helper()
	var out []diskqueue.Record
	for len(out) < n {
		rec, err := q.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}
