package spillq_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// Tests of the dead-letter store (deadletter.go); the crash test is
// deadletter_crash_test.go.

// letters lists every dead letter of d, failing t on an error.
func letters(t *testing.T, d *spillq.DeadLetters) []spillq.DeadLetter {
	t.Helper()
	var out []spillq.DeadLetter
	for dl, err := range d.List(context.Background(), spillq.DeadFilter{}) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		out = append(out, dl)
	}
	return out
}

// TestDeadLetterStoreKeepsEveryReason: a message failed, one out of
// attempts after a Retry with a cause and one expired are each stored with
// their body, key, ID, put time, attempts, reason and the handler's error
// text, and are still there after a restart.
func TestDeadLetterStoreKeepsEveryReason(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{MaxAttempts: 2})
	ctx := context.Background()
	if err := q.PutWith(ctx, []byte("unparsable"), channel.PutOptions{Key: []byte("k1")}); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, []byte("flaky")); err != nil {
		t.Fatal(err)
	}
	failed := recv(t, q)
	if err := failed.Fail(errors.New("bad json at byte 3")); err != nil {
		t.Fatal(err)
	}
	flaky := recv(t, q)
	for range 2 {
		if err := flaky.Retry(0, errors.New("upstream 503")); err != nil {
			t.Fatal(err)
		}
		if flaky.Attempts < 2 {
			flaky = recv(t, q)
		}
	}
	if err := q.PutWith(ctx, []byte("stale"), channel.PutOptions{Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if m, err := q.Receive(rctx); err == nil {
		t.Fatalf("an expired message was delivered: %q", m.Body)
	}
	cancel()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	q = open(t, dir, spillq.Options{})
	defer q.Close()
	got := letters(t, q.DeadLetters())
	if len(got) != 3 || q.DeadLetters().Len() != 3 {
		t.Fatalf("after a restart the store holds %d letters (Len %d), want 3: %+v", len(got), q.DeadLetters().Len(), got)
	}
	want := []struct {
		body, key, text string
		id              channel.ID
		put             time.Time
		reason          spillq.DeadReason
		attempts        uint16
	}{
		{"unparsable", "k1", "bad json at byte 3", failed.ID, failed.Timestamp, spillq.DeadFailed, 1},
		{"flaky", "", "upstream 503", flaky.ID, flaky.Timestamp, spillq.DeadMaxAttempts, 2},
		{"stale", "", channel.ErrExpired.Error(), 0, time.Time{}, spillq.DeadExpired, 0},
	}
	for i, w := range want {
		dl := got[i]
		if string(dl.Body) != w.body || string(dl.Key) != w.key || dl.Reason != w.reason || dl.Attempts != w.attempts || !strings.Contains(dl.Error, w.text) {
			t.Errorf("letter %d = body %q key %q reason %v attempts %d error %q; want %q %q %v %d containing %q", i, dl.Body, dl.Key, dl.Reason, dl.Attempts, dl.Error, w.body, w.key, w.reason, w.attempts, w.text)
		}
		if w.id != 0 && (dl.ID != w.id || !dl.PutAt.Equal(w.put)) {
			t.Errorf("letter %d: ID %s put %v, want %s put %v", i, dl.ID, dl.PutAt, w.id, w.put)
		}
		if dl.DeadAt.Before(dl.PutAt) || time.Since(dl.DeadAt) > time.Minute {
			t.Errorf("letter %d: DeadAt %v, put %v", i, dl.DeadAt, dl.PutAt)
		}
	}
	if dl, err := q.DeadLetters().Get(ctx, failed.ID); err != nil || string(dl.Body) != "unparsable" {
		t.Errorf("Get(%s) = %q, %v", failed.ID, dl.Body, err)
	}
	if _, err := q.DeadLetters().Get(ctx, 42); !errors.Is(err, spillq.ErrNoDeadLetter) {
		t.Errorf("Get of an unknown ID: %v, want ErrNoDeadLetter", err)
	}
}

// TestRedriveKeepsIDAndKeyAndResetsAttempts: a redriven letter comes back
// with its ID, key, body and put time, on its first attempt, and leaves
// the store; one left out by the filter stays; Purge removes the rest.
func TestRedriveKeepsIDAndKeyAndResetsAttempts(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{MaxAttempts: 3})
	defer q.Close()
	ctx := context.Background()
	var ids []channel.ID
	for i := range 3 {
		if err := q.PutWith(ctx, body(i), channel.PutOptions{Key: []byte{'k', byte('0' + i)}}); err != nil {
			t.Fatal(err)
		}
		m := recv(t, q)
		m.Fail(errors.New("no"))
		ids = append(ids, m.ID)
	}
	d := q.DeadLetters()
	n, err := d.Redrive(ctx, spillq.DeadFilter{IDs: ids[1:2]})
	if err != nil || n != 1 {
		t.Fatalf("Redrive by ID = %d, %v; want 1", n, err)
	}
	m := recv(t, q)
	if m.ID != ids[1] || string(m.Key) != "k1" || index(t, m) != 1 || m.Attempts != 1 {
		t.Fatalf("redriven: ID %s key %q body %q attempts %d; want ID %s key k1 body 1 attempts 1", m.ID, m.Key, m.Body, m.Attempts, ids[1])
	}
	m.Finish()
	if d.Len() != 2 {
		t.Fatalf("after redriving one of 3 the store holds %d", d.Len())
	}
	// A time range that ends before every letter selects none.
	if n, err := d.Redrive(ctx, spillq.DeadFilter{Until: time.Now().Add(-time.Hour)}); n != 0 || err != nil {
		t.Fatalf("Redrive of an empty range = %d, %v", n, err)
	}
	if n, err := d.Purge(ctx, spillq.DeadFilter{Since: time.Now().Add(-time.Hour)}); n != 2 || err != nil {
		t.Fatalf("Purge = %d, %v; want 2", n, err)
	}
	if d.Len() != 0 || len(letters(t, d)) != 0 {
		t.Fatalf("after Purge the store holds %d", d.Len())
	}
	if q.Depth() != 0 {
		t.Fatalf("Purge put something back: depth %d", q.Depth())
	}
}

// TestRedriveUnderKeyUnique: a letter whose key has another message
// pending is refused and kept; once that message is finished it goes.
// Under KeyDedup, a letter's own earlier Put does not make it a duplicate.
func TestRedriveUnderKeyPolicies(t *testing.T) {
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyDedup} {
		t.Run(policy.String(), func(t *testing.T) {
			q := open(t, t.TempDir(), spillq.Options{Keys: policy, MaxAttempts: 1})
			defer q.Close()
			ctx := context.Background()
			key := channel.PutOptions{Key: []byte("order-7")}
			if err := q.PutWith(ctx, []byte("v1"), key); err != nil {
				t.Fatal(err)
			}
			recv(t, q).Fail(errors.New("no"))
			d := q.DeadLetters()
			if policy == channel.KeyUnique {
				if err := q.PutWith(ctx, []byte("v2"), key); err != nil {
					t.Fatal(err)
				}
				n, err := d.Redrive(ctx, spillq.DeadFilter{})
				if n != 0 || !errors.Is(err, channel.ErrDuplicate) || d.Len() != 1 {
					t.Fatalf("Redrive with the key pending = %d, %v, Len %d; want 0, ErrDuplicate, 1", n, err, d.Len())
				}
				recv(t, q).Finish()
			}
			if n, err := d.Redrive(ctx, spillq.DeadFilter{}); n != 1 || err != nil {
				t.Fatalf("Redrive = %d, %v; want 1", n, err)
			}
			if m := recv(t, q); string(m.Body) != "v1" {
				t.Fatalf("redriven %q", m.Body)
			}
			// The key is taken again (pending, or put within the window).
			if err := q.PutWith(ctx, []byte("v3"), key); !errors.Is(err, channel.ErrDuplicate) {
				t.Fatalf("a Put of the redriven key: %v, want ErrDuplicate", err)
			}
		})
	}
}

// TestDeadLetterHookOfYourOwn: a DeadLetter handler replaces the store's
// (nothing is stored unless it calls Add); DiscardDeadLetters opens none.
func TestDeadLetterHookOfYourOwn(t *testing.T) {
	dir := t.TempDir()
	var q *spillq.Queue
	var seen []string
	q = open(t, dir, spillq.Options{MaxAttempts: 1, DeadLetter: func(m *channel.Message, reason error) error {
		seen = append(seen, string(m.Body))
		if string(m.Body) == "keep" {
			return q.DeadLetters().Add(m, reason)
		}
		return nil
	}})
	ctx := context.Background()
	for _, b := range []string{"drop", "keep"} {
		q.Put(ctx, []byte(b))
		recv(t, q).Fail(nil)
	}
	if got := letters(t, q.DeadLetters()); len(got) != 1 || string(got[0].Body) != "keep" || !slices.Equal(seen, []string{"drop", "keep"}) {
		t.Fatalf("stored %+v, the handler saw %q", got, seen)
	}
	q.Close()

	dir = t.TempDir()
	q = open(t, dir, spillq.Options{MaxAttempts: 1, DiscardDeadLetters: true})
	defer q.Close()
	if q.DeadLetters() != nil {
		t.Fatal("DiscardDeadLetters: DeadLetters() is not nil")
	}
	q.Put(ctx, []byte("x"))
	recv(t, q).Fail(nil)
	if _, err := os.Stat(filepath.Join(dir, spillq.DeadDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DiscardDeadLetters made %s: %v", spillq.DeadDir, err)
	}
}

// TestTopicChannelDeadLetters: a topic's channel keeps its own letters,
// counted in its ChannelStats open or not, and a redrive delivers to that
// channel alone.
func TestTopicChannelDeadLetters(t *testing.T) {
	dir := t.TempDir()
	top, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	a, err := top.Channel("a", spillq.ChannelOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := top.Channel("b", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := top.PutWith(ctx, []byte("x"), channel.PutOptions{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	ma, err := a.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ma.Fail(errors.New("a cannot"))
	mb, err := b.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mb.Finish()
	da, err := top.DeadLetters("a")
	if err != nil {
		t.Fatal(err)
	}
	if db, _ := top.DeadLetters("b"); db.Len() != 0 || da.Len() != 1 {
		t.Fatalf("letters: a %d, b %d; want 1, 0", da.Len(), db.Len())
	}
	if n, err := da.Redrive(ctx, spillq.DeadFilter{}); n != 1 || err != nil {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	again, err := a.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != ma.ID || string(again.Body) != "x" || string(again.Key) != "k" || again.Attempts != 1 {
		t.Fatalf("redriven to a: ID %s body %q key %q attempts %d", again.ID, again.Body, again.Key, again.Attempts)
	}
	if m, err := b.TryReceive(); !errors.Is(err, channel.ErrNoMessage) {
		t.Fatalf("b got the redrive of a's letter: %v, %v", m, err)
	}
	again.Fail(errors.New("still"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := top.DeadLetters("a"); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Fatalf("DeadLetters of a closed channel: %v", err)
	}
	for _, cs := range top.Stats().Channels {
		if want := map[string]int64{"a": 1, "b": 0}[cs.Name]; cs.DeadLetters != want {
			t.Errorf("channel %s: DeadLetters %d, want %d (open %v)", cs.Name, cs.DeadLetters, want, cs.Open)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, spillq.ChannelsDir, "a", spillq.DeadDir)); err != nil {
		t.Fatal(err)
	}
}

// TestRedriveEndsWhileLettersComeBack: a consumer fails every message at
// once, so each letter redriven comes back as a new one while Redrive
// runs; Redrive puts back only the letters there when it began, and
// returns (it read on to the store's end, and so put the same messages
// back again and again, for ever: TestDeadLetterSIGKILL's child never
// returned from it).
func TestRedriveEndsWhileLettersComeBack(t *testing.T) {
	q := open(t, t.TempDir(), spillq.Options{MaxAttempts: 1})
	ctx := context.Background()
	const n = 20
	for i := range n {
		q.Put(ctx, body(i))
		recv(t, q).Fail(nil)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := q.Receive(ctx)
			if err != nil {
				return
			}
			m.Fail(nil)
		}
	}()
	got, err := q.DeadLetters().Redrive(ctx, spillq.DeadFilter{})
	q.Close()
	<-done
	if got != n || err != nil {
		t.Fatalf("Redrive = %d, %v; want %d: the letters stored when it began", got, err, n)
	}
}

// TestListDeadLettersBesideService: ListDeadLetters reads a store its
// queue has open, with a filter, stops when the caller does, and says a
// missing store is missing.
func TestListDeadLettersBesideService(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{})
	defer q.Close()
	ctx := context.Background()
	var ids []channel.ID
	for _, b := range []string{"a", "b", "c"} {
		q.Put(ctx, []byte(b))
		m := recv(t, q)
		m.Fail(nil)
		ids = append(ids, m.ID)
	}
	store := filepath.Join(dir, spillq.DeadDir)
	var got []string
	for dl, err := range spillq.ListDeadLetters(ctx, store, spillq.DeadFilter{IDs: []channel.ID{ids[0], ids[2]}}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(dl.Body))
		if dl.Seq != 0 {
			break
		}
	}
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("ListDeadLetters -id a,c: %q", got)
	}
	n := 0
	for _, err := range spillq.ListDeadLetters(ctx, filepath.Join(dir, "nope"), spillq.DeadFilter{}) {
		if n++; !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ListDeadLetters of a missing store: %v, want ErrNotExist", err)
		}
	}
	if n != 1 {
		t.Fatalf("ListDeadLetters of a missing store yielded %d times, want its error once", n)
	}
}
