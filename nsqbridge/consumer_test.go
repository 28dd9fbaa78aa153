package nsqbridge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/nsqbridge"
)

type deadMessage struct {
	m      *channel.Message
	reason error
}

// TestConsumerUnlimitedAttempts: MaxAttempts zero means unlimited, as for a
// Channel; go-nsq's default would finish the message after 5 silently.
func TestConsumerUnlimitedAttempts(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	p.Publish(context.Background(), msg(1))
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := uint16(1); attempt <= 8; attempt++ {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if m.Attempts != attempt {
			t.Fatalf("got attempt %d, want %d", m.Attempts, attempt)
		}
		if err := m.Requeue(0); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.DeadLetters != 0 || st.Requeued != 8 {
		t.Fatalf("stats %+v", st)
	}
}

// TestConsumerMaxAttempts: a message requeued after its last attempt goes
// to DeadLetter with channel.ErrMaxAttempts, as on a Channel, and nsqd
// holds it no more.
func TestConsumerMaxAttempts(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	p.Publish(context.Background(), msg(1))
	syncPublisher(t, p)
	dead := make(chan deadMessage, 1)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MaxAttempts: 2,
		DeadLetter: func(m *channel.Message, reason error) error { dead <- deadMessage{m, reason}; return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := uint16(1); attempt <= 2; attempt++ {
		m, err := c.Receive(ctx)
		if err != nil || m.Attempts != attempt {
			t.Fatalf("delivery %d: %v, attempts %d", attempt, err, m.Attempts)
		}
		if err := m.Requeue(0); err != nil {
			t.Fatal(err)
		}
		if attempt == 2 {
			if err := m.Finish(); !errors.Is(err, channel.ErrNotInFlight) {
				t.Fatalf("Finish of a dead letter: %v", err)
			}
		}
	}
	d := <-dead
	if !errors.Is(d.reason, channel.ErrMaxAttempts) || num(t, d.m) != 1 || d.m.Attempts != 2 {
		t.Fatalf("dead letter %v attempts %d: %v", d.m.Body, d.m.Attempts, d.reason)
	}
	if st := c.Stats(); st.DeadLetters != 1 || st.Requeued != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Finished at nsqd: the same connection carried the FIN before this
	// publish, so once the next message arrives nsqd has forgotten it.
	p.Publish(context.Background(), msg(2))
	m, err := c.Receive(ctx)
	if err != nil || num(t, m) != 2 {
		t.Fatalf("next message: %v %v", m, err)
	}
	m.Finish()
	if ch := nsqd.stats("jobs").Channels; len(ch) != 1 || ch[0].Depth != 0 || ch[0].DeferredCount != 0 {
		t.Fatalf("nsqd channel stats %+v", ch)
	}
}

// TestConsumerTimeout: a message not finished within MsgTimeout is
// delivered again by nsqd; after its last attempt that delivery goes to
// DeadLetter, and a late Finish of the timed-out delivery returns
// channel.ErrNotInFlight, as on a Channel.
func TestConsumerTimeout(t *testing.T) {
	t.Parallel() // waits a second for a message to time out (nsqd's shortest MsgTimeout)
	nsqd := startNSQD(t)
	nsqd.scanChannel("jobs", "workers")
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	p.Publish(context.Background(), msg(1))
	dead := make(chan deadMessage, 1)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MaxAttempts: 1, MsgTimeout: time.Second,
		DeadLetter: func(m *channel.Message, reason error) error { dead <- deadMessage{m, reason}; return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil || m.Attempts != 1 {
		t.Fatalf("first delivery: %v", err)
	}
	received := time.Now()
	d := <-dead // nsqd timed it out and delivered it again
	if !errors.Is(d.reason, channel.ErrMaxAttempts) || d.m.Attempts != 2 {
		t.Fatalf("dead letter attempts %d: %v", d.m.Attempts, d.reason)
	}
	// The consumer times a delivery from when it arrived, nsqd from when it
	// sent it, so nsqd, scanning the channel every 100 ms, can deliver the
	// message again a few milliseconds before the first delivery's timeout
	// runs out here. The answers below are to come after it.
	time.Sleep(time.Until(received.Add(time.Second)))
	for name, answer := range map[string]func() error{"Finish": m.Finish, "Touch": m.Touch, "Requeue": func() error { return m.Requeue(0) }} {
		if err := answer(); !errors.Is(err, channel.ErrNotInFlight) {
			t.Fatalf("%s after the timeout: %v, want ErrNotInFlight", name, err)
		}
	}
	if st := c.Stats(); st.TimedOut != 1 || st.Finished != 0 || st.DeadLetters != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestConsumerCloseRequeuesEveryHeld: Close gives back every message
// received and not answered. It sent the requeues while its connection
// still had RDY, so nsqd sent one of them straight back to the closing
// consumer, where it stayed in flight until its timeout (a user trial
// found it: depth 2, in flight 1, after holding 3). Close now sets RDY 0
// first.
func TestConsumerCloseRequeuesEveryHeld(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	const n = 3
	for i := range n {
		if err := p.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	syncPublisher(t, p)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MsgTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range n {
		if _, err := c.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the RDY count back up after the deliveries
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := nsqd.stats("jobs")
		if len(st.Channels) == 1 && st.Channels[0].InFlight == 0 && st.Channels[0].Depth == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after Close: %+v; want all %d back in the channel, none in flight", st.Channels, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsumerStatsAfterTimeout: a delivery left unanswered counts as
// timed out, and no longer in flight, once its timeout runs out, as at
// nsqd; answering it later counts it no more. A field report found it in
// flight a second after nsqd had delivered it again, and counted only
// when the late answer came.
func TestConsumerStatsAfterTimeout(t *testing.T) {
	t.Parallel() // waits a second for a message to time out (nsqd's shortest MsgTimeout)
	nsqd := startNSQD(t)
	nsqd.scanChannel("jobs", "workers")
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	p.Publish(context.Background(), msg(1))
	// The delivery nsqd sends after the timeout goes to DeadLetter, so no
	// second delivery is in flight here, with a timeout of its own, while
	// the stats are checked.
	dead := make(chan deadMessage, 1)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MaxAttempts: 1, MsgTimeout: time.Second,
		DeadLetter: func(m *channel.Message, reason error) error { dead <- deadMessage{m, reason}; return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil || m.Attempts != 1 {
		t.Fatalf("first delivery: %v", err)
	}
	if st := c.Stats(); st.InFlight+int(st.TimedOut) != 1 {
		t.Fatalf("stats after Receive: %+v, want the delivery in flight or timed out", st)
	}
	st := waitStats(t, c, func(st nsqbridge.ConsumerStats) bool { return st.TimedOut > 0 })
	if st.TimedOut != 1 || st.InFlight != 0 || st.OldestInFlight != 0 || st.Received != 1 {
		t.Fatalf("stats once the timeout ran out: %+v, want 1 timed out and none in flight", st)
	}
	<-dead // nsqd delivered it again
	for name, answer := range map[string]func() error{"Finish": m.Finish, "Touch": m.Touch, "Requeue": func() error { return m.Requeue(0) }} {
		if err := answer(); !errors.Is(err, channel.ErrNotInFlight) {
			t.Fatalf("%s after the timeout: %v, want ErrNotInFlight", name, err)
		}
	}
	st = c.Stats()
	if st.TimedOut != 1 || st.InFlight != 0 || st.Finished != 0 || st.Requeued != 0 || st.DeadLetters != 1 {
		t.Fatalf("stats after the late answers: %+v, want the delivery counted once as timed out", st)
	}
}

// waitStats polls c's stats until ok holds, for up to 30 s.
func waitStats(t *testing.T, c *nsqbridge.Consumer, ok func(nsqbridge.ConsumerStats) bool) nsqbridge.ConsumerStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := c.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats after 30 s: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
