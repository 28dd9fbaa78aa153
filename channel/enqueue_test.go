package channel_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// seqBackend is a memStore (its Log numbers its records) that can stall its reads.
func seqBackend() *stallingBackend {
	return &stallingBackend{memStore: newMemStore(), took: make(chan struct{}), release: make(chan struct{})}
}

// TestEnqueueReceipt: Enqueue's receipt names the message Receive hands
// out, and says whether its record went to the backend (with its seq when
// the backend tells seqs) or not (the memory buffer, the timer store, the
// memory heap of deferred messages).
func TestEnqueueReceipt(t *testing.T) {
	type put struct {
		delay  time.Duration
		logged bool
		seq    uint64 // when logged
	}
	for _, tc := range []struct {
		name string
		opts func() channel.Options
		puts []put
	}{
		{"memory", func() channel.Options { return channel.Options{MemQueueSize: 4} },
			[]put{{}, {}}},
		{"backend with seqs", func() channel.Options { return channel.Options{Backend: seqBackend().store()} },
			[]put{{logged: true, seq: 0}, {logged: true, seq: 1}, {logged: true, seq: 2}}},
		{"backend without seqs", func() channel.Options { return channel.Options{Backend: unnumbered{newMemStore()}.store()} },
			[]put{{logged: true}, {logged: true}}},
		// The second finds the buffer full and spills: the memory path's
		// own message, not sent, goes to the backend.
		{"memory then spill", func() channel.Options { return channel.Options{MemQueueSize: 1, Backend: seqBackend().store()} },
			[]put{{}, {logged: true, seq: 0}, {logged: true, seq: 1}}},
		{"deferred to the timer store", func() channel.Options {
			return channel.Options{Backend: seqBackend().store(), Timers: newMemStore().store()}
		}, []put{{delay: time.Hour}, {logged: true, seq: 0}}},
		{"deferred to the backend", func() channel.Options { return channel.Options{Backend: seqBackend().store()} },
			[]put{{delay: time.Hour, logged: true, seq: 0}, {logged: true, seq: 1}}},
		{"deferred in memory", func() channel.Options { return channel.Options{MemQueueSize: 4} },
			[]put{{delay: time.Hour}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newChannel(t, tc.opts())
				defer c.Close()
				ctx := context.Background()
				ids := map[channel.ID]bool{}
				for i, p := range tc.puts {
					r, err := c.Enqueue(ctx, []byte("m"), channel.PutOptions{Delay: p.delay})
					if err != nil {
						t.Fatalf("Enqueue %d: %v", i, err)
					}
					want := channel.Receipt{ID: r.ID, Logged: p.logged, Seq: p.seq}
					if r.ID == 0 || ids[r.ID] || r != want {
						t.Fatalf("Enqueue %d: receipt %+v, want %+v with a new ID", i, r, want)
					}
					ids[r.ID] = true
				}
				time.Sleep(time.Hour) // the deferred ones come due
				for range tc.puts {
					m := await(t, c)
					if !ids[m.ID] {
						t.Fatalf("received message %d, which no receipt named (%v)", m.ID, ids)
					}
					delete(ids, m.ID)
					m.Finish()
				}
			})
		})
	}
}

// TestEnqueueErrors: a Put that stored its message but stopped waiting
// for it to be durable still gives its receipt; one that stored nothing
// gives the zero Receipt.
func TestEnqueueErrors(t *testing.T) {
	ctx := context.Background()
	c := newChannel(t, channel.Options{Backend: notDurableBackend{newMemStore()}.store()})
	r, err := c.Enqueue(ctx, []byte("m"), channel.PutOptions{})
	if !errors.Is(err, channel.ErrNotDurable) || r.ID == 0 || !r.Logged {
		t.Fatalf("Enqueue: %+v, %v; want an ID, Logged, and ErrNotDurable", r, err)
	}
	m := receive(t, c)
	if m.ID != r.ID {
		t.Fatalf("received %d, receipt %d", m.ID, r.ID)
	}
	m.Finish()
	c.Close()
	if r, err := c.Enqueue(ctx, []byte("m"), channel.PutOptions{}); !errors.Is(err, channel.ErrClosed) || r != (channel.Receipt{}) {
		t.Fatalf("Enqueue after Close: %+v, %v", r, err)
	}
	c = newChannel(t, channel.Options{MemQueueSize: 1, FailWhenFull: true})
	defer c.Close()
	if _, err := c.Enqueue(ctx, []byte("m"), channel.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Enqueue(ctx, []byte("m"), channel.PutOptions{}); !errors.Is(err, channel.ErrFull) || r != (channel.Receipt{}) {
		t.Fatalf("Enqueue to a full buffer: %+v, %v", r, err)
	}
}

// TestDuplicateErrorID: the error of a Put refused as a duplicate is a
// DuplicateError naming the message that holds the key, the ID the first
// Enqueue returned, and is still ErrDuplicate; with DuplicatesOK the
// receipt names it.
func TestDuplicateErrorID(t *testing.T) {
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyDedup} {
		for _, backend := range []bool{false, true} {
			name := policy.String() + "/memory"
			o := channel.Options{Keys: policy, MemQueueSize: 4}
			if backend {
				name = policy.String() + "/backend"
				o = channel.Options{Keys: policy, Backend: seqBackend().store()}
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				c := newChannel(t, o)
				defer c.Close()
				key := []byte("order-1")
				first, err := c.Enqueue(ctx, []byte("v1"), channel.PutOptions{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if first.Logged != backend {
					t.Fatalf("first receipt %+v, want Logged %v", first, backend)
				}
				r, err := c.Enqueue(ctx, []byte("v2"), channel.PutOptions{Key: key})
				var dup *channel.DuplicateError
				if !errors.Is(err, channel.ErrDuplicate) || !errors.As(err, &dup) {
					t.Fatalf("second Enqueue: %v, want a DuplicateError", err)
				}
				if dup.ID != first.ID || string(dup.Key) != "order-1" || dup.Policy != policy || r != (channel.Receipt{}) {
					t.Fatalf("DuplicateError %+v (receipt %+v), want ID %d of key order-1 under %v", dup, r, first.ID, policy)
				}
				// Delivered (and finished), the message still holds the key
				// under KeyDedup; under KeyUnique, while in flight.
				m := receive(t, c)
				if m.ID != first.ID {
					t.Fatalf("received %d, receipt %d", m.ID, first.ID)
				}
				if policy == channel.KeyDedup {
					m.Finish()
				}
				if err := c.PutWith(ctx, []byte("v3"), channel.PutOptions{Key: key}); !errors.As(err, &dup) || dup.ID != first.ID {
					t.Fatalf("Put while delivered: %v, want a DuplicateError naming %d", err, first.ID)
				}
			})
		}
	}
	t.Run("DuplicatesOK", func(t *testing.T) {
		ctx := context.Background()
		c := newChannel(t, channel.Options{Keys: channel.KeyUnique, DuplicatesOK: true, MemQueueSize: 4})
		defer c.Close()
		first, err := c.Enqueue(ctx, []byte("v1"), channel.PutOptions{Key: []byte("k")})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, []byte("v2"), channel.PutOptions{Key: []byte("k")})
		if want := (channel.Receipt{ID: first.ID, Duplicate: true}); err != nil || r != want {
			t.Fatalf("duplicate Enqueue: %+v, %v; want %+v", r, err, want)
		}
		if c.Depth() != 1 {
			t.Fatalf("depth %d, want 1", c.Depth())
		}
	})
}

// TestKeyDedupRetryAfterNotDurable: a Put that returned ErrNotDurable
// stored its message, so under KeyDedup its key is taken: the producer's
// retry is refused as a duplicate naming the stored message, and the
// message is delivered once (as ErrNotDurable's and KeyDedup's docs say).
func TestKeyDedupRetryAfterNotDurable(t *testing.T) {
	ctx := context.Background()
	c := newChannel(t, channel.Options{Backend: notDurableBackend{newMemStore()}.store(), Keys: channel.KeyDedup})
	defer c.Close()
	po := channel.PutOptions{Key: []byte("req-7")}
	r, err := c.Enqueue(ctx, []byte("v1"), po)
	if !errors.Is(err, channel.ErrNotDurable) {
		t.Fatalf("Enqueue: %v, want ErrNotDurable", err)
	}
	_, err = c.Enqueue(ctx, []byte("retry"), po)
	var dup *channel.DuplicateError
	if !errors.As(err, &dup) || dup.ID != r.ID {
		t.Fatalf("retry after ErrNotDurable: %v, want a DuplicateError naming %d", err, r.ID)
	}
	if m := receive(t, c); m.ID != r.ID || string(m.Body) != "v1" || c.Depth() != 0 {
		t.Fatalf("received %d %q, depth %d after; want %d \"v1\" alone", m.ID, m.Body, c.Depth(), r.ID)
	}
}
