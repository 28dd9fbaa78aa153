package spillq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// receiveID receives one message from ch within 10 s, finishes it, and
// returns its ID.
func receiveID(t *testing.T, ch consumer) channel.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := ch.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	m.Finish()
	return m.ID
}

// TestQueueEnqueueReceipt: a queue's Enqueue names the message Receive
// hands out; one put to the log is Logged at its record's seq, one to the
// memory buffer or (deferred) the timer store is not.
func TestQueueEnqueueReceipt(t *testing.T) {
	ctx := context.Background()
	q, err := spillq.Open(t.TempDir(), spillq.Options{MemQueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	mem, err := q.Enqueue(ctx, []byte("to memory"), channel.PutOptions{})
	if err != nil || mem.Logged || mem.ID == 0 {
		t.Fatalf("Enqueue to memory: %+v, %v", mem, err)
	}
	var logged [2]channel.Receipt
	for i := range logged {
		if logged[i], err = q.Enqueue(ctx, []byte("to the log"), channel.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if want := (channel.Receipt{ID: logged[i].ID, Logged: true, Seq: uint64(i)}); logged[i] != want {
			t.Fatalf("Enqueue %d to the log: %+v, want %+v", i, logged[i], want)
		}
	}
	deferred, err := q.Enqueue(ctx, []byte("deferred"), channel.PutOptions{Delay: time.Millisecond})
	if err != nil || deferred.Logged || deferred.ID == 0 {
		t.Fatalf("deferred Enqueue: %+v, %v", deferred, err)
	}
	if n := q.Timers().Depth(); n != 1 {
		t.Fatalf("timer store holds %d records, want the deferred message's", n)
	}
	receiveIDs(t, q, mem.ID, logged[0].ID, logged[1].ID, deferred.ID)
}

// receiveIDs receives and finishes len(ids) messages from ch, in any
// order, and fails unless their IDs are ids.
func receiveIDs(t *testing.T, ch consumer, ids ...channel.ID) {
	t.Helper()
	want := map[channel.ID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for range ids {
		got := receiveID(t, ch)
		if !want[got] {
			t.Fatalf("received ID %d, not one of the receipts' (%v) left", got, want)
		}
		delete(want, got)
	}
}

// TestTopicEnqueueReceipt: a topic's Enqueue names the message every
// channel receives; one the memory path took is not Logged, one in the
// log is, at its seq, deferred or not.
func TestTopicEnqueueReceipt(t *testing.T) {
	ctx := context.Background()
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer tp.Close()
	a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
	var rs []channel.Receipt
	for i, delay := range []time.Duration{0, 0, time.Millisecond} {
		r, err := tp.Enqueue(ctx, []byte("m"), channel.PutOptions{Delay: delay})
		if want := (channel.Receipt{ID: r.ID, Logged: true, Seq: uint64(i)}); err != nil || r.ID == 0 || r != want {
			t.Fatalf("Enqueue %d: %+v, %v; want %+v", i, r, err, want)
		}
		rs = append(rs, r)
	}
	b := topicChannel(t, tp, "b", spillq.ChannelOptions{Start: diskqueue.FromSeq(0)})
	for _, ch := range []*spillq.Channel{a, b} {
		receiveIDs(t, ch, rs[0].ID, rs[1].ID, rs[2].ID)
	}

	// The memory path: every channel of the topic open, each with a
	// memory buffer with room.
	mt := openTopic(t, t.TempDir(), spillq.TopicOptions{})
	defer mt.Close()
	c := topicChannel(t, mt, "c", spillq.ChannelOptions{MemQueueSize: 4})
	r, err := mt.Enqueue(ctx, []byte("m"), channel.PutOptions{})
	if err != nil || r.Logged || r.ID == 0 {
		t.Fatalf("Enqueue through the memory path: %+v, %v", r, err)
	}
	if st := mt.Stats(); st.ToMemory != 1 {
		t.Fatalf("topic stats %+v, want the message in memory", st)
	}
	if got := receiveID(t, c); got != r.ID {
		t.Fatalf("received ID %d, want %d", got, r.ID)
	}
}

// TestEnqueueDuplicateID: a Put refused as a duplicate, on a queue and on
// a topic, under KeyUnique and KeyDedup, is a DuplicateError naming the
// message the first Enqueue stored, and errors.Is finds ErrDuplicate in
// it; a queue's KeyUnique key restored at a restart names it too.
func TestEnqueueDuplicateID(t *testing.T) {
	ctx := context.Background()
	key := channel.PutOptions{Key: []byte("job-1")}
	check := func(t *testing.T, err error, policy channel.KeyPolicy, want channel.ID) {
		t.Helper()
		var dup *channel.DuplicateError
		if !errors.Is(err, channel.ErrDuplicate) || !errors.As(err, &dup) {
			t.Fatalf("second Put: %v, want a DuplicateError", err)
		}
		if dup.ID != want || dup.Policy != policy || string(dup.Key) != "job-1" {
			t.Fatalf("DuplicateError %+v, want ID %d under %v", dup, want, policy)
		}
	}
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyDedup} {
		t.Run(policy.String()+"/queue", func(t *testing.T) {
			dir := t.TempDir()
			q, err := spillq.Open(dir, spillq.Options{Keys: policy})
			if err != nil {
				t.Fatal(err)
			}
			first, err := q.Enqueue(ctx, []byte("v1"), key)
			if err != nil {
				t.Fatal(err)
			}
			_, err = q.Enqueue(ctx, []byte("v2"), key)
			check(t, err, policy, first.ID)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			if q, err = spillq.Open(dir, spillq.Options{Keys: policy}); err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			err = q.PutWith(ctx, []byte("v3"), key)
			check(t, err, policy, first.ID) // restored, the key names its message
			if got := receiveID(t, q); got != first.ID {
				t.Fatalf("received %d, want %d", got, first.ID)
			}
		})
		t.Run(policy.String()+"/topic", func(t *testing.T) {
			dir := t.TempDir()
			tp := openTopic(t, dir, spillq.TopicOptions{Keys: policy})
			topicChannel(t, tp, "a", spillq.ChannelOptions{}) // the message is a's
			first, err := tp.Enqueue(ctx, []byte("v1"), key)
			if err != nil || !first.Logged {
				t.Fatalf("Enqueue: %+v, %v", first, err)
			}
			_, err = tp.Enqueue(ctx, []byte("v2"), key)
			check(t, err, policy, first.ID)
			if err := tp.Close(); err != nil {
				t.Fatal(err)
			}
			tp = openTopic(t, dir, spillq.TopicOptions{Keys: policy})
			defer tp.Close()
			a := topicChannel(t, tp, "a", spillq.ChannelOptions{})
			err = tp.PutWith(ctx, []byte("v3"), key)
			check(t, err, policy, first.ID)
			if got := receiveID(t, a); got != first.ID {
				t.Fatalf("received %d, want %d", got, first.ID)
			}
		})
	}
	t.Run("topic DuplicatesOK", func(t *testing.T) {
		tp := openTopic(t, t.TempDir(), spillq.TopicOptions{Keys: channel.KeyDedup, DuplicatesOK: true})
		defer tp.Close()
		first, err := tp.Enqueue(ctx, []byte("v1"), key)
		if err != nil {
			t.Fatal(err)
		}
		r, err := tp.Enqueue(ctx, []byte("v2"), key)
		if want := (channel.Receipt{ID: first.ID, Duplicate: true}); err != nil || r != want {
			t.Fatalf("duplicate Enqueue: %+v, %v; want %+v", r, err, want)
		}
	})
}
