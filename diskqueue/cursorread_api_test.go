package diskqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// ReadBatch hands out the records ready, in order and in flight as from
// Read, across segments, and waits only for the first.
func TestReadBatch(t *testing.T) {
	dir := t.TempDir()
	q, err := diskqueue.Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if n, err := q.ReadBatch(ctx, nil); n != 0 || err != nil {
		t.Fatalf("ReadBatch into nothing: %d, %v", n, err)
	}
	putN(t, q, 0, 100) // five segments
	dst := make([]diskqueue.Record, 7)
	var got []diskqueue.Record
	for len(got) < 100 {
		n, err := q.ReadBatch(ctx, dst)
		if err != nil || n < 1 || n > len(dst) {
			t.Fatalf("ReadBatch after %d records: %d, %v", len(got), n, err)
		}
		got = append(got, dst[:n]...)
		if st := q.Stats(); st.InFlight != int64(len(got)) {
			t.Fatalf("%d records handed out, InFlight %d", len(got), st.InFlight)
		}
	}
	for i, rec := range got {
		if rec.Seq != uint64(i) || !bytes.Equal(rec.Body, body(i)) {
			t.Fatalf("record %d: seq %d body %q", i, rec.Seq, rec.Body)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := q.ReadBatch(done, dst); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadBatch with nothing ready and a done ctx: %d, %v", n, err)
	}
	for _, rec := range got {
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after acknowledging everything", d)
	}
	// One waiting for the first record gets it once it is put.
	res := make(chan error, 1)
	go func() {
		n, err := q.ReadBatch(ctx, dst)
		if err == nil && (n != 1 || dst[0].Seq != 100) {
			err = fmt.Errorf("got %d records, first seq %d", n, dst[0].Seq)
		}
		res <- err
	}()
	putN(t, q, 100, 1)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}
