package channel_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// diskChannel is a channel over a diskqueue.Queue in a temporary
// directory, with every Put to disk: the backend Puts go to with
// PutWithHead (putDisk).
func diskChannel(t *testing.T, opts channel.Options) (*channel.Channel, *diskqueue.Queue) {
	t.Helper()
	dq, err := diskqueue.Open(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Backend = channel.Store{Log: dq.Log, Cursor: dq.OwnCursor(), Close: dq.Close}
	c, err := channel.New(opts)
	if err != nil {
		dq.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, dq
}

// storedAt returns the message in record seq of dq, and the record.
func storedAt(t *testing.T, dq *diskqueue.Queue, seq uint64) (*channel.Message, diskqueue.Record) {
	t.Helper()
	rec, err := dq.ReadAt(seq)
	if err != nil {
		t.Fatal(err)
	}
	m, err := channel.UnmarshalMessage(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return m, rec
}

// TestPutDiskStamp checks the timestamps of messages put to a
// diskqueue.Log: one due now, without a key, carries its record's
// timestamp (the log's clock, no reading of the channel's own), and is
// delivered with it; one with a delay, or a key the policy goes by, is
// stamped by the channel when put, never with an earlier reading the log
// kept, so that its due time is no earlier than the delay after the Put
// and its dedup window starts at the Put.
func TestPutDiskStamp(t *testing.T) {
	ctx := context.Background()
	c, dq := diskChannel(t, channel.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour})
	r, err := c.Enqueue(ctx, []byte("plain"), channel.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if !r.Logged {
		t.Fatal("not logged")
	}
	m, rec := storedAt(t, dq, r.Seq)
	if !m.Timestamp.Equal(rec.Time) || m.Timestamp.After(after) {
		t.Fatalf("stamped %v, record's time %v, Put returned at %v", m.Timestamp, rec.Time, after)
	}
	got, err := c.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r.ID || !got.Timestamp.Equal(rec.Time) {
		t.Fatalf("delivered %v stamped %v, want %v stamped %v", got.ID, got.Timestamp, r.ID, rec.Time)
	}
	got.Finish()

	// The log's reading of the first Put is likely still the one it
	// stamps records with: these two must not take it.
	before := time.Now()
	const delay = time.Hour
	r, err = c.Enqueue(ctx, []byte("later"), channel.PutOptions{Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	m, _ = storedAt(t, dq, r.Seq)
	if m.Timestamp.Before(before) || m.Due().Before(before.Add(delay)) {
		t.Fatalf("put at %v or later with a delay of %v: stamped %v, due %v", before, delay, m.Timestamp, m.Due())
	}
	r, err = c.Enqueue(ctx, []byte("keyed"), channel.PutOptions{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ = storedAt(t, dq, r.Seq); m.Timestamp.Before(before) {
		t.Fatalf("keyed, put at %v or later: stamped %v", before, m.Timestamp)
	}
	// Within the window the policy started at the Put, which the clock
	// has moved on from (a key admitted unstamped would have the zero
	// time's, as would the second Put).
	_, err = c.Enqueue(ctx, []byte("again"), channel.PutOptions{Key: []byte("k")})
	var dup *channel.DuplicateError
	if !errors.As(err, &dup) || dup.Age <= 0 || dup.Age > time.Since(before) {
		t.Fatalf("the key put again within its window: %v, want a DuplicateError of an age since %v", err, before)
	}
}

// TestPutDiskEnvelopes checks that each kind of envelope goes to a
// diskqueue.Log whole, header and body: with and without a due time, an
// expiry and a key, the key short enough for the header to be encoded on
// the stack or too long for it (a buffer of the pool's).
func TestPutDiskEnvelopes(t *testing.T) {
	ctx := context.Background()
	c, dq := diskChannel(t, channel.Options{})
	expires := time.Now().Add(time.Hour).Truncate(0)
	for _, keyLen := range []int{0, 1, 57, 58, 59, 60, channel.MaxKeyBytes} {
		for _, delay := range []time.Duration{0, time.Hour} {
			for _, exp := range []time.Time{{}, expires} {
				name := fmt.Sprintf("key=%d/delay=%v/expires=%v", keyLen, delay, !exp.IsZero())
				po := channel.PutOptions{Delay: delay, Expires: exp, Key: []byte(strings.Repeat("k", keyLen))}
				body := []byte("body of " + name)
				r, err := c.Enqueue(ctx, body, po)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				m, _ := storedAt(t, dq, r.Seq)
				if m.ID != r.ID || !bytes.Equal(m.Body, body) || !bytes.Equal(m.Key, po.Key) || m.Timestamp.IsZero() ||
					(delay == 0) != m.Due().IsZero() {
					t.Fatalf("%s: stored ID %v key %q body %q stamped %v due %v", name, m.ID, m.Key, m.Body, m.Timestamp, m.Due())
				}
				if want := r.Seq; want+1 != dq.NextSeq() {
					t.Fatalf("%s: record %d, next %d", name, want, dq.NextSeq())
				}
			}
		}
	}
}

// TestPutBackUnstamped checks that a message put back with the zero
// Timestamp is stamped when stored, over a diskqueue.Log (by the log) and
// over another Log (by the channel), rather than stored with the zero
// Time's nanoseconds, which are not a time.
func TestPutBackUnstamped(t *testing.T) {
	ctx := context.Background()
	// Both clocks, the log's and the channel's, start after this.
	start := time.Now()
	disk, _ := diskChannel(t, channel.Options{})
	mem, err := channel.New(channel.Options{Backend: newMemStore().store()})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for name, c := range map[string]*channel.Channel{"disk": disk, "other": mem} {
		if errs := c.PutBack(ctx, []*channel.Message{channel.NewMessage(7, []byte("back"), time.Time{}, 3, nil)}); errs[0] != nil {
			t.Fatalf("%s: %v", name, errs[0])
		}
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != 7 || m.Timestamp.Before(start) || m.Timestamp.After(time.Now()) {
			t.Fatalf("%s: put back unstamped after %v: delivered %v stamped %v", name, start, m.ID, m.Timestamp)
		}
		m.Finish()
	}
}
