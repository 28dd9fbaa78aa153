package diskqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// TestPutWithHead checks that PutWithHead stores head and body as one
// record, with the record's own timestamp patched in at stampAt, on each
// path a record takes to the log: copied into the mapping, written with
// pwrite (a big frame), written with write(2), and compressed. The record
// read back must be what one PutSeq of the joined bytes would have stored.
func TestPutWithHead(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		body int
	}{
		{"mapped", Options{}, 100},
		{"bigframe", Options{}, 3 * bigFrame},
		{"writepath", Options{writePathForTesting: true}, 100},
		{"compressed", Options{Compress: true}, 4000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := mustOpen(t, t.TempDir(), c.opts)
			defer q.Close()
			ctx := context.Background()
			head := []byte("HEAD-0123456789-TAIL")
			body := bytes.Repeat([]byte("body "), c.body/5)
			for i := range 3 {
				stampAt := []int{4, -1, len(head) - 8}[i]
				seq, ts, err := q.PutWithHead(ctx, head, body, stampAt)
				if err != nil {
					t.Fatal(err)
				}
				if string(head) != "HEAD-0123456789-TAIL" {
					t.Fatalf("PutWithHead changed the caller's head: %q", head)
				}
				rec, err := q.ReadAt(seq)
				if err != nil {
					t.Fatal(err)
				}
				want := append(append([]byte(nil), head...), body...)
				if stampAt >= 0 {
					binary.BigEndian.PutUint64(want[stampAt:], uint64(ts))
					if ts == 0 {
						t.Fatal("stamped with 0")
					}
					if c.name != "compressed" && ts != rec.Time.UnixNano() {
						t.Fatalf("stamp %d, record's time %d", ts, rec.Time.UnixNano())
					}
				} else if ts != 0 {
					t.Fatalf("ts %d without a stamp asked for", ts)
				}
				if !bytes.Equal(rec.Body, want) {
					t.Fatalf("record %d (stampAt %d):\n got %q\nwant %q", seq, stampAt, rec.Body[:40], want[:40])
				}
			}
		})
	}
}

// TestPutWithHeadRefuses checks the refusals, which store nothing: a
// record out of the size limits counting head and body together, and a
// stamp that does not fit in head.
func TestPutWithHeadRefuses(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{MinRecordBytes: 12, MaxRecordBytes: 20})
	defer q.Close()
	ctx := context.Background()
	for _, c := range []struct {
		head, body int
		stampAt    int
		want       error
	}{
		{10, 11, -1, ErrRecordTooLarge},
		{5, 6, -1, ErrRecordTooSmall},
		{8, 4, 1, ErrInvalidOptions},
		{4, 10, 0, ErrInvalidOptions},
	} {
		t.Run(fmt.Sprintf("head=%d/body=%d/stampAt=%d", c.head, c.body, c.stampAt), func(t *testing.T) {
			_, _, err := q.PutWithHead(ctx, make([]byte, c.head), make([]byte, c.body), c.stampAt)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if _, _, err := q.PutWithHead(ctx, make([]byte, 10), make([]byte, 10), 2); err != nil {
		t.Fatal(err)
	}
	if q.Depth() != 1 {
		t.Fatalf("refused records counted: Depth %d", q.Depth())
	}
}
