package nsqbridge_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
	"github.com/spillq/spillq/nsqbridge"
)

func openPublisher(t testing.TB, dir string, nsqd *server) *nsqbridge.Publisher {
	t.Helper()
	return openPublisherWith(t, dir, nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}})
}

// openPublisherWith opens a publisher with o, publishing to "jobs" by
// default, retrying every 20 ms and syncing every message locally.
func openPublisherWith(t testing.TB, dir string, o nsqbridge.PublisherOptions) *nsqbridge.Publisher {
	t.Helper()
	if o.Topic == "" {
		o.Topic = "jobs"
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = 20 * time.Millisecond
	}
	if o.Disk.SyncEvery == 0 {
		o.Disk.SyncEvery = 1
	}
	p, err := nsqbridge.OpenPublisher(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newConsumer returns a consumer of o, reading "jobs" on channel "workers"
// by default. Its go-nsq config asks nsqd to flush what it sends within
// 25 ms (nsqd's minimum) rather than 250 ms (go-nsq's default): nsqd holds
// a message for up to that long while the consumer could take more, so
// each requeue or timeout round trip of a test would wait for it.
func newConsumer(t testing.TB, o nsqbridge.ConsumerOptions) *nsqbridge.Consumer {
	t.Helper()
	if o.Topic == "" {
		o.Topic, o.Channel = "jobs", "workers"
	}
	if o.NSQConfig == nil {
		o.NSQConfig = nsq.NewConfig()
	}
	o.NSQConfig.OutputBufferTimeout = 25 * time.Millisecond
	c, err := nsqbridge.NewConsumer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func msg(i int) []byte { return []byte(fmt.Sprintf("msg-%06d", i)) }

func num(t testing.TB, m *channel.Message) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(string(m.Body), "msg-"))
	if err != nil {
		t.Fatalf("unknown payload %q", m.Body)
	}
	return i
}

// work is a worker written against channel.Receiver: it runs unchanged on
// a local channel or on nsqd. It finishes messages until it has seen want
// distinct ones, and returns the order in which each was first seen.
func work(t testing.TB, r channel.Receiver, want int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[int]bool{}
	var order []int
	for len(seen) < want {
		m, err := r.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after %d of %d: %v", len(seen), want, err)
		}
		i := num(t, m)
		if !seen[i] {
			seen[i] = true
			order = append(order, i)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	return order
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	const n = 1000
	for i := 0; i < n; i++ {
		if err := p.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	order := work(t, c, n)
	if len(order) != n {
		t.Fatalf("received %d distinct of %d", len(order), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Forwarded != n || st.Pending != 0 {
		t.Fatalf("publisher stats %+v", st)
	}
	// The same worker runs on a local channel.
	local, _ := channel.New(channel.Options{MemQueueSize: 10})
	defer local.Close()
	local.Put(context.Background(), msg(7))
	if got := work(t, local, 1); got[0] != 7 {
		t.Fatalf("local: %v", got)
	}
}

// TestNSQDKilledMidStream: nsqd dies (SIGKILL) while messages flow;
// publishing goes on into the local queue; when nsqd is back the backlog
// drains to zero, nothing acknowledged is lost, and order holds.
func TestNSQDKilledMidStream(t *testing.T) {
	t.Parallel()
	// nsqd keeps messages only in memory by default, and persists its own
	// disk queue's positions only every 2500 messages: a SIGKILL of nsqd
	// would lose messages it had acknowledged, through no fault of the
	// bridge. Make nsqd write every message and its position.
	nsqd := startNSQD(t, "--mem-queue-size=0", "--sync-every=1")
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 2000
	for i := 0; i < n/2; i++ {
		if err := p.Publish(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	nsqd.kill()
	for i := n / 2; i < n; i++ {
		if err := p.Publish(ctx, msg(i)); err != nil {
			t.Fatalf("Publish with nsqd down: %v", err)
		}
	}
	if st := p.Stats(); st.Pending == 0 {
		t.Fatal("nothing pending locally while nsqd is down")
	}
	nsqd.start()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Pending != 0 || st.SendErrors+st.ConnectErrors == 0 || st.Reconnects == 0 {
		t.Fatalf("after nsqd came back: %+v", st)
	}
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MaxInFlight: 1})
	order := work(t, c, n)
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("order broken: %d after %d", order[i], order[i-1])
		}
	}
}

// TestPublisherChild publishes with nsqd unreachable and reports each
// message Publish accepted; the parent kills it.
func TestPublisherChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestPublisherKilled")
	}
	p, err := nsqbridge.OpenPublisher(dir, nsqbridge.PublisherOptions{
		NSQD: []string{os.Getenv("SPILLQ_DEAD_NSQD")}, Topic: "jobs", Disk: diskqueue.Options{SyncEvery: 1},
	})
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	for i := 0; ; i++ {
		if err := p.Publish(context.Background(), msg(i)); err != nil {
			crashtest.Report("put-error", err)
			select {}
		}
		crashtest.Report("put", i)
	}
}

// TestPublisherKilled: the publishing process dies (SIGKILL) with a local
// backlog; a new publisher on the same directory forwards all of it.
func TestPublisherKilled(t *testing.T) {
	t.Parallel()
	dead := freePort(t) // nothing listens here
	dir := t.TempDir()
	res := crashtest.Start(t, crashtest.Run{
		Test: "TestPublisherChild", Dir: dir, Env: []string{"SPILLQ_DEAD_NSQD=" + dead},
		KillAfter: 300, KillKind: "put",
	})
	acked := len(res.Events["put"])
	nsqd := startNSQD(t)
	p := openPublisher(t, dir, nsqd)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	order := work(t, c, acked)
	if len(order) < acked {
		t.Fatalf("forwarded %d of %d acknowledged", len(order), acked)
	}
}

// TestRequeueAndTimeoutThroughNSQD: Requeue and an unfinished message's
// timeout are nsqd's own mechanisms, with attempts counted by nsqd.
func TestRequeueAndTimeoutThroughNSQD(t *testing.T) {
	t.Parallel() // waits a second for a message to time out (nsqd's shortest MsgTimeout)
	nsqd := startNSQD(t)
	nsqd.scanChannel("jobs", "workers")
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	p.Publish(context.Background(), msg(1))
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MsgTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	m, err := c.Receive(ctx)
	if err != nil || m.Attempts != 1 {
		t.Fatalf("first delivery: %v, attempts %d", err, m.Attempts)
	}
	if err := m.Requeue(0); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); !errors.Is(err, channel.ErrNotInFlight) {
		t.Fatalf("Finish after Requeue: %v", err)
	}
	m, err = c.Receive(ctx)
	if err != nil || m.Attempts != 2 {
		t.Fatalf("after Requeue: %v, attempts %d", err, m.Attempts)
	}
	t.Logf("requeued message back after %v", time.Since(start))
	// Not finished: nsqd times it out (after 1 s) and delivers it again.
	m, err = c.Receive(ctx)
	if err != nil || m.Attempts != 3 || num(t, m) != 1 {
		t.Fatalf("after a timeout: %v, attempts %d", err, m.Attempts)
	}
	t.Logf("timed-out message back after %v", time.Since(start))
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Received != 3 || st.Finished != 1 || st.Requeued != 1 {
		t.Fatalf("consumer stats %+v", st)
	}
}

// TestViaLookupd finds nsqd through nsqlookupd.
func TestViaLookupd(t *testing.T) {
	t.Parallel()
	lookupd := startLookupd(t)
	nsqd := startNSQD(t, "--lookupd-tcp-address="+lookupd.TCP)
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	for i := 0; i < 10; i++ {
		p.Publish(context.Background(), msg(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Sync(ctx); err != nil { // the topic exists, so nsqd registered it
		t.Fatal(err)
	}
	cfg := nsq.NewConfig()
	cfg.LookupdPollInterval = 100 * time.Millisecond
	c := newConsumer(t, nsqbridge.ConsumerOptions{Lookupd: []string{lookupd.HTTP}, NSQConfig: cfg})
	if got := work(t, c, 10); len(got) != 10 {
		t.Fatalf("got %v", got)
	}
}

func TestOptionErrors(t *testing.T) {
	if _, err := nsqbridge.OpenPublisher(t.TempDir(), nsqbridge.PublisherOptions{}); !errors.Is(err, nsqbridge.ErrInvalidOptions) {
		t.Fatalf("publisher: %v", err)
	}
	if _, err := nsqbridge.NewConsumer(nsqbridge.ConsumerOptions{Topic: "x"}); !errors.Is(err, nsqbridge.ErrInvalidOptions) {
		t.Fatalf("consumer: %v", err)
	}
}
