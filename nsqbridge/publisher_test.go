package nsqbridge_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/nsqbridge"
)

// deadLetters collects what a publisher hands its DeadLetter handler.
type deadLetters struct {
	mu      sync.Mutex
	got     []nsqbridge.Rejected
	reasons []error
}

func (d *deadLetters) handle(m nsqbridge.Rejected, reason error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, m)
	d.reasons = append(d.reasons, reason)
}

func (d *deadLetters) all() ([]nsqbridge.Rejected, []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]nsqbridge.Rejected(nil), d.got...), append([]error(nil), d.reasons...)
}

func syncPublisher(t testing.TB, p *nsqbridge.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPoisonMessage: nsqd refuses one message of 1,000 (larger than its
// --max-msg-size, though within the publisher's limit). The other 999
// arrive, the refused one reaches DeadLetter with nsqd's reason, and
// forwarding goes on.
func TestPoisonMessage(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t, "--max-msg-size=1024")
	var dl deadLetters
	p := openPublisherWith(t, t.TempDir(), nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, DeadLetter: dl.handle})
	defer p.Close()
	const n, poison = 1000, 500
	poisonBody := append(msg(poison), bytes.Repeat([]byte("x"), 2000)...)
	for i := 0; i < n; i++ {
		body := msg(i)
		if i == poison {
			body = poisonBody
		}
		if err := p.Publish(context.Background(), body); err != nil {
			t.Fatal(err)
		}
	}
	syncPublisher(t, p)
	got, reasons := dl.all()
	if len(got) != 1 || !bytes.Equal(got[0].Body, poisonBody) || got[0].Topic != "jobs" {
		t.Fatalf("dead letters %+v, want the poison message", got)
	}
	if !errors.Is(reasons[0], nsqbridge.ErrRefused) || !strings.Contains(reasons[0].Error(), "E_BAD_MESSAGE") {
		t.Fatalf("reason %v, want ErrRefused with nsqd's E_BAD_MESSAGE", reasons[0])
	}
	if st := p.Stats(); st.Forwarded != n-1 || st.Refused != 1 || st.DeadLetters != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	order := work(t, c, n-1)
	for _, i := range order {
		if i == poison {
			t.Fatal("the poison message was delivered")
		}
	}
	if ts := nsqd.stats("jobs"); ts.MessageCount != n-1 {
		t.Fatalf("nsqd took %d messages, want %d", ts.MessageCount, n-1)
	}
}

// TestPublishChecks: what nsqd would refuse by its known limits is refused
// by Publish and never stored.
func TestPublishChecks(t *testing.T) {
	p := openPublisherWith(t, t.TempDir(), nsqbridge.PublisherOptions{
		NSQD: []string{freePort(t)}, MaxMsgSize: 100, MaxDelay: time.Minute,
	})
	defer p.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		put  func() error
		want error
	}{
		{"empty", func() error { return p.Publish(ctx, nil) }, nsqbridge.ErrEmptyMessage},
		{"too large", func() error { return p.Publish(ctx, make([]byte, 101)) }, nsqbridge.ErrMessageTooLarge},
		{"bad topic", func() error { return p.PublishTo(ctx, "a b", []byte("x")) }, nsqbridge.ErrInvalidTopic},
		{"long topic", func() error { return p.PublishTo(ctx, strings.Repeat("t", 65), []byte("x")) }, nsqbridge.ErrInvalidTopic},
		{"long delay", func() error { return p.DeferredPublish(ctx, "jobs", time.Hour, []byte("x")) }, nsqbridge.ErrInvalidDelay},
		{"negative delay", func() error { return p.DeferredPublish(ctx, "jobs", -time.Second, []byte("x")) }, nsqbridge.ErrInvalidDelay},
	} {
		if err := tc.put(); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := p.Publish(ctx, make([]byte, 100)); err != nil {
		t.Fatalf("a message at the limit: %v", err)
	}
	// A ctx already ended stores nothing (SyncEvery 1): the error is the
	// whole truth. It used to store the message and return the ctx's
	// error from the wait for its fsync, and forward it all the same.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Publish(ended, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish with an ended ctx: %v", err)
	}
	if st := p.Stats(); st.Invalid != 6 || st.Published != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v", st)
	}
	p.Close()
	if err := p.Publish(ctx, []byte("x")); !errors.Is(err, nsqbridge.ErrClosed) {
		t.Fatalf("Publish after Close: %v", err)
	}
	if err := p.Sync(ctx); !errors.Is(err, nsqbridge.ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
}

// TestLargeMessagesBacklog: 64 KiB messages pile up while nsqd is down; a
// batch of 100 of them would be over nsqd's 5 MiB --max-body-size, so
// batches are cut by bytes too, and all of them are forwarded once nsqd is
// up.
func TestLargeMessagesBacklog(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	nsqd.kill()
	p := openPublisherWith(t, t.TempDir(), nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}})
	defer p.Close()
	const n = 200
	big := func(i int) []byte { return append(msg(i), bytes.Repeat([]byte{'.'}, 64<<10-len(msg(i)))...) }
	for i := 0; i < n; i++ {
		if err := p.Publish(context.Background(), big(i)); err != nil {
			t.Fatal(err)
		}
	}
	nsqd.start()
	syncPublisher(t, p)
	if st := p.Stats(); st.Forwarded != n || st.DeadLetters != 0 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[int]bool{}
	for len(seen) < n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(seen), n, err)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(string(m.Body[:len(msg(0))]), "msg-"))
		if err != nil {
			t.Fatalf("unknown payload %.20q", m.Body)
		}
		if !bytes.Equal(m.Body, big(i)) {
			t.Fatalf("message %d has the wrong body", i)
		}
		seen[i] = true
		m.Finish()
	}
}

// TestSyncWhilePublishing: Sync waits for what was published before it,
// not for the local queue to empty, so it returns while another goroutine
// keeps publishing; by then nsqd has every earlier message.
func TestSyncWhilePublishing(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	p := openPublisherWith(t, t.TempDir(), nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, Disk: diskqueue.Options{SyncEvery: diskqueue.DefaultSyncEvery}})
	defer p.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The noise keeps the local queue from ever emptying, so a Sync
		// that waited for that would never return; but it tops the queue
		// up to maxNoise at most: unbounded, it could outrun forwarding,
		// and each Sync waited for a backlog that grew all the while
		// (2 to 11 s a run). It yields rather than sleeps at the bound: a
		// timer's sleep can overrun by long enough for forwarding to
		// empty the queue, and a Sync that waited for an empty queue
		// then passed.
		const maxNoise = 20000
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%100 == 0 && p.Stats().Pending > maxNoise {
				runtime.Gosched()
				i--
				continue
			}
			if err := p.PublishTo(context.Background(), "noise", msg(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for round := 0; round < 3; round++ {
		const n = 500
		for i := 0; i < n; i++ {
			if err := p.Publish(context.Background(), msg(i)); err != nil {
				t.Fatal(err)
			}
		}
		syncPublisher(t, p)
		if got := nsqd.stats("jobs").MessageCount; got < uint64(n*(round+1)) {
			t.Fatalf("round %d: Sync returned with nsqd holding %d of %d", round, got, n*(round+1))
		}
	}
}

// TestPublishToAndDeferred: each message's topic and due time travel
// through the local queue, across a restart of the publisher (the first
// one never reached nsqd), and reach nsqd as PUB/MPUB to that topic and
// DPUB.
func TestPublishToAndDeferred(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	jobs := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	other := newConsumer(t, nsqbridge.ConsumerOptions{Topic: "other", Channel: "workers", NSQD: []string{nsqd.TCP}})
	dir := t.TempDir()
	p := openPublisherWith(t, dir, nsqbridge.PublisherOptions{NSQD: []string{freePort(t)}})
	ctx := context.Background()
	for _, put := range []func() error{
		func() error { return p.PublishTo(ctx, "other", msg(1)) },
		func() error { return p.DeferredPublish(ctx, "jobs", 30*time.Minute, msg(2)) },
		func() error { return p.Publish(ctx, msg(3)) },
		func() error { return p.DeferredPublish(ctx, "other", 0, msg(4)) },
	} {
		if err := put(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	p = openPublisherWith(t, dir, nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}})
	defer p.Close()
	syncPublisher(t, p)
	if got := work(t, other, 2); len(got) != 2 || got[0]+got[1] != 1+4 {
		t.Fatalf("topic other got %v, want 1 and 4", got)
	}
	if got := work(t, jobs, 1); got[0] != 3 {
		t.Fatalf("topic jobs got %v, want 3", got)
	}
	ts := nsqd.stats("jobs")
	if ts.MessageCount != 2 || len(ts.Channels) != 1 || ts.Channels[0].DeferredCount != 1 {
		t.Fatalf("topic jobs: %+v, want 2 messages, 1 of them deferred", ts)
	}
}

// TestBadLocalRecords: a local record that is not a publisher message (a
// bare body from before the envelope), or no longer passes Publish's
// checks (MaxMsgSize lowered since), goes to DeadLetter and the messages
// around it are forwarded.
func TestBadLocalRecords(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	dir := t.TempDir()
	p := openPublisherWith(t, dir, nsqbridge.PublisherOptions{NSQD: []string{freePort(t)}})
	p.Publish(context.Background(), msg(0))
	p.Publish(context.Background(), bytes.Repeat([]byte("y"), 200))
	p.Close()
	q, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Put(context.Background(), []byte("a bare body"))
	q.Put(context.Background(), appendEnvelopeForTest("jobs", msg(1)))
	q.Close()
	var dl deadLetters
	p = openPublisherWith(t, dir, nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, MaxMsgSize: 100, DeadLetter: dl.handle})
	defer p.Close()
	syncPublisher(t, p)
	got, reasons := dl.all()
	if len(got) != 2 || !errors.Is(reasons[0], nsqbridge.ErrMessageTooLarge) || !errors.Is(reasons[1], nsqbridge.ErrBadEnvelope) ||
		string(got[1].Body) != "a bare body" {
		t.Fatalf("dead letters %v: %v", got, reasons)
	}
	if st := p.Stats(); st.BadRecords != 2 || st.DeadLetters != 2 || st.Forwarded != 2 {
		t.Fatalf("stats %+v", st)
	}
	if got := work(t, newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}}), 2); got[0]+got[1] != 0+1 {
		t.Fatalf("received %v, want 0 and 1", got)
	}
}

// appendEnvelopeForTest is a plain publish's record, as FORMAT.md
// specifies it.
func appendEnvelopeForTest(topic string, body []byte) []byte {
	return append(append([]byte{1, 0, byte(len(topic))}, topic...), body...)
}
