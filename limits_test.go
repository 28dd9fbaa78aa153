package spillq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestMaxRecordBytesIsTheBodyLimit: Disk.MaxRecordBytes, through Open,
// limits the body the caller puts, not the envelope the channel stores: a
// body of exactly the limit goes through the disk and back, one byte more
// is refused at Put with the body's own size in the error, memory buffer
// or not.
func TestMaxRecordBytesIsTheBodyLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int // Disk.MaxRecordBytes
		body  int // the limit in effect
	}{
		{"default", 0, diskqueue.DefaultMaxRecordBytes},
		{"set", 1000, 1000},
	} {
		for _, mem := range []int{0, 10} {
			t.Run(fmt.Sprintf("%s/mem=%d", tc.name, mem), func(t *testing.T) {
				dir := t.TempDir()
				q := open(t, dir, spillq.Options{MemQueueSize: mem, Disk: diskqueue.Options{MaxRecordBytes: tc.limit}})
				ctx := context.Background()
				exact := bytes.Repeat([]byte("e"), tc.body)
				if err := q.Put(ctx, exact); err != nil {
					t.Fatalf("Put of a body of exactly the limit (%d bytes): %v", tc.body, err)
				}
				err := q.Put(ctx, append(exact, 'x'))
				if !errors.Is(err, channel.ErrTooLarge) {
					t.Fatalf("Put of %d bytes over a %d-byte limit: got %v, want ErrTooLarge", tc.body+1, tc.body, err)
				}
				if want := fmt.Sprintf("body of %d bytes, limit %d", tc.body+1, tc.body); !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q", err, want)
				}
				// A key counts toward the same limit: the error says what
				// the two take (it said "body of 1 bytes, limit -26" for a
				// key longer than the limit).
				if tc.limit > 0 {
					key := bytes.Repeat([]byte("k"), tc.body+10)
					err := q.PutWith(ctx, []byte("b"), channel.PutOptions{Key: key})
					if want := fmt.Sprintf("body of 1 bytes and key of %d take %d bytes of the %d", len(key), len(key)+3, tc.body); !errors.Is(err, channel.ErrTooLarge) || !strings.Contains(err.Error(), want) {
						t.Fatalf("Put with a key over the limit: %v, want ErrTooLarge saying %q", err, want)
					}
				}
				if err := q.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				q = open(t, dir, spillq.Options{MemQueueSize: mem, Disk: diskqueue.Options{MaxRecordBytes: tc.limit}})
				defer q.Close()
				m := recv(t, q)
				if !bytes.Equal(m.Body, exact) {
					t.Fatalf("after reopen got a %d-byte body, want the %d-byte one put", len(m.Body), len(exact))
				}
				m.Finish()
				if d := q.Depth(); d != 0 {
					t.Fatalf("Depth %d after the one message, want 0: the refused Put was kept", d)
				}
			})
		}
	}
}

// TestMinRecordBytesIsTheBodyLimit: so is Disk.MinRecordBytes, though the
// envelope alone is longer than the minimum.
func TestMinRecordBytesIsTheBodyLimit(t *testing.T) {
	for _, mem := range []int{0, 10} {
		t.Run(fmt.Sprintf("mem=%d", mem), func(t *testing.T) {
			dir := t.TempDir()
			o := spillq.Options{MemQueueSize: mem, Disk: diskqueue.Options{MinRecordBytes: 8}}
			q := open(t, dir, o)
			ctx := context.Background()
			err := q.Put(ctx, []byte("1234567"))
			if !errors.Is(err, channel.ErrTooSmall) || !strings.Contains(err.Error(), "body of 7 bytes, minimum 8") {
				t.Fatalf("Put of 7 bytes with Disk.MinRecordBytes 8: got %v, want ErrTooSmall with both sizes", err)
			}
			if err := q.Put(ctx, []byte("12345678")); err != nil {
				t.Fatalf("Put of exactly the minimum: %v", err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q = open(t, dir, o)
			defer q.Close()
			if m := recv(t, q); string(m.Body) != "12345678" {
				t.Fatalf("after reopen got %q", m.Body)
			}
		})
	}
}

func TestRecordBytesOutOfRange(t *testing.T) {
	for _, o := range []diskqueue.Options{
		{MaxRecordBytes: -1},
		{MaxRecordBytes: 1<<31 - 1},
		{MinRecordBytes: -1},
		{MinRecordBytes: 101, MaxRecordBytes: 100},
	} {
		if _, err := spillq.Open(t.TempDir(), spillq.Options{Disk: o}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
			t.Fatalf("Disk.MinRecordBytes %d, MaxRecordBytes %d: got %v, want ErrInvalidOptions", o.MinRecordBytes, o.MaxRecordBytes, err)
		}
	}
}

// TestBodyLimitBound: the largest Disk.MaxRecordBytes Open takes is the
// log's limit less the envelope, and one over it is refused with that
// bound in the error (it named a bound 21 bytes too high, which Open then
// refused with another message; a user's trial).
func TestBodyLimitBound(t *testing.T) {
	limit := diskqueue.MaxRecordBytesLimit - channel.MaxEnvelopeOverhead
	q, err := spillq.Open(t.TempDir(), spillq.Options{Disk: diskqueue.Options{MaxRecordBytes: limit}})
	if err != nil {
		t.Fatalf("Open with Disk.MaxRecordBytes at the bound %d: %v", limit, err)
	}
	q.Close()
	_, err = spillq.Open(t.TempDir(), spillq.Options{Disk: diskqueue.Options{MaxRecordBytes: limit + 1}})
	if !errors.Is(err, diskqueue.ErrInvalidOptions) || !strings.Contains(err.Error(), fmt.Sprintf("[0, %d]", limit)) {
		t.Fatalf("Open with Disk.MaxRecordBytes one over the bound: %v, want ErrInvalidOptions naming [0, %d]", err, limit)
	}
}

// TestInvalidOptionsSayWhatIsWrong: options no queue can work with are
// refused at Open and OpenTopic with the sentinel Open's doc names, and
// the error says only what is wrong with them.
func TestInvalidOptionsSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts spillq.Options
		want string
	}{
		{"ratio above 1", spillq.Options{CompactDirtyRatio: 2}, "CompactDirtyRatio 2 is above 1"},
		{"budget for no record", spillq.Options{Disk: diskqueue.Options{MaxDiskBytes: 100}}, "MaxDiskBytes 100 cannot hold a single record"},
		{"negative SyncEvery", spillq.Options{Disk: diskqueue.Options{SyncEvery: -1}}, "SyncEvery -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spillq.Open(t.TempDir(), tc.opts)
			if !errors.Is(err, diskqueue.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want diskqueue.ErrInvalidOptions saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "body limit") {
				t.Errorf("Open's error explains the record limit, which is not what is wrong: %v", err)
			}
			topts := spillq.TopicOptions{Disk: tc.opts.Disk, CompactDirtyRatio: tc.opts.CompactDirtyRatio}
			if _, err := spillq.OpenTopic(t.TempDir(), topts); !errors.Is(err, diskqueue.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenTopic: %v, want diskqueue.ErrInvalidOptions saying %q", err, tc.want)
			}
		})
	}
}

// TestCloseAtAFullBudgetReturns: with Disk.BlockWhenFull and the disk
// budget spent, Close cannot store again the message in flight (nobody
// consumes during Close, so no room comes): it waited for room for ever.
// It gives up after a bounded wait, reports nothing lost (the message's
// record stays), and the message comes again after the reopen; so do all
// the others.
func TestCloseAtAFullBudgetReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("waits closeStoreWait (5 s) for room that does not come; not in -short")
	}
	dir := t.TempDir()
	o := spillq.Options{Disk: diskqueue.Options{MaxDiskBytes: 64 << 10, MaxSegmentBytes: 16 << 10, BlockWhenFull: true}}
	q := open(t, dir, o)
	ctx := context.Background()
	n := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := q.Put(pctx, bytes.Repeat([]byte{'x'}, 1000))
		cancel()
		if err != nil {
			if !errors.Is(err, diskqueue.ErrDiskFull) {
				t.Fatalf("Put %d: %v, want ErrDiskFull", n, err)
			}
			break
		}
		n++
	}
	recv(t, q) // in flight
	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v; nothing held in memory only was lost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close still waits for room a minute on")
	}
	q = open(t, dir, o)
	defer q.Close()
	for i := range n {
		m := recv(t, q)
		if err := m.Finish(); err != nil {
			t.Fatalf("message %d of %d: Finish: %v", i, n, err)
		}
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after the %d messages put", d, n)
	}
}
