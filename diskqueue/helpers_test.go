package diskqueue

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// Helpers shared by the tests of several concepts.

func mustOpen(t testing.TB, dir string, opts Options) *Queue {
	t.Helper()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

// putBench opens a queue at dir with opts and puts n 100-byte records.
func putBench(b testing.TB, dir string, opts Options, n int) *Queue {
	b.Helper()
	q, err := Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	body := make([]byte, 100)
	for i := 0; i < n; i++ {
		if err := q.Put(ctx, body); err != nil {
			q.Close()
			b.Fatal(err)
		}
	}
	return q
}

// fixedBody is record i's body: 10 bytes, so a segment of
// fileHeaderSize+3*frameSize(10) bytes holds records 3k..3k+2.
func fixedBody(i int) []byte { return []byte(fmt.Sprintf("record-%03d", i)) }

// putFixed puts fixedBody(0..n-1).
func putFixed(t *testing.T, q *Queue, n int) {
	t.Helper()
	for i := range n {
		if err := q.Put(context.Background(), fixedBody(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// readFixed reads what q has ready, each record fixedBody of its seq, and
// returns their seqs.
func readFixed(t *testing.T, q *Queue) []uint64 {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var got []uint64
	for {
		rec, err := q.Read(done)
		if err != nil {
			return got
		}
		if !bytes.Equal(rec.Body, fixedBody(int(rec.Seq))) {
			t.Fatalf("seq %d holds %q", rec.Seq, rec.Body)
		}
		got = append(got, rec.Seq)
	}
}

// readSeqs reads from r until a Read fails (with a done ctx: what r has
// ready) and returns the seqs read.
func readSeqs(ctx context.Context, r interface {
	Read(context.Context) (Record, error)
}) []uint64 {
	var got []uint64
	for {
		rec, err := r.Read(ctx)
		if err != nil {
			return got
		}
		got = append(got, rec.Seq)
	}
}

// ackReady reads what r has ready, acknowledging each record as it is
// read, and returns how many it read.
func ackReady(t *testing.T, r interface {
	Read(context.Context) (Record, error)
	Ack(uint64) error
}) int {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	for {
		rec, err := r.Read(done)
		if err != nil {
			return n
		}
		if err := r.Ack(rec.Seq); err != nil {
			t.Fatalf("ack %d: %v", rec.Seq, err)
		}
		n++
	}
}

// openNamedCursor opens the log at /q with opts and its cursor name,
// reading from the oldest.
func openNamedCursor(t *testing.T, opts Options, name string) (*Log, *Cursor) {
	t.Helper()
	l, err := OpenLog("/q", opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Cursor(name, FromOldest())
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return l, c
}

// readAcking reads n records from r without waiting and acknowledges
// those ack says (every one, with ack nil).
func readAcking(t *testing.T, r interface {
	Read(context.Context) (Record, error)
	Ack(uint64) error
}, n int, ack func(seq uint64) bool) {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range n {
		rec, err := r.Read(done)
		if err != nil {
			t.Fatal(err)
		}
		if ack == nil || ack(rec.Seq) {
			if err := r.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
}

const threePerSegment = fileHeaderSize + 3*recordHeaderSize + 3*10

// fixedQueue opens a queue at /q on a new memFS of kind, three records
// (fixedBody) a segment, and returns the options it opened with.
func fixedQueue(t *testing.T, kind memFSKind) (*memFS, Options, *Queue) {
	t.Helper()
	mfs := kind.new(t)
	opts := Options{MaxSegmentBytes: threePerSegment, FS: mfs}
	q, err := Open("/q", opts)
	if err != nil {
		t.Fatal(err)
	}
	return mfs, opts, q
}
