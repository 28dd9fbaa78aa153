//go:build unix

package nsqbridge_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/nsqbridge"
)

// freeze stops nsqd (SIGSTOP) and returns once it has stopped: kill(2)
// returns before, and nsqd may still answer what reaches it meanwhile.
func freeze(t *testing.T, nsqd *server) {
	t.Helper()
	nsqd.cmd.Process.Signal(syscall.SIGSTOP)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(nsqd.cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("waiting for nsqd to stop: %v (status %v)", err, ws)
	}
}

// TestCloseWithBacklog: Close stops forwarding at once (after the batch in
// flight) rather than draining a large backlog, reports what waits, and a
// publisher opened again on the directory forwards the rest. nsqd is
// stopped while the backlog is published and runs again once Close has
// stopped forwarding, so the backlog is there whichever goroutine is
// faster: with nsqd running all along, the test assumed the forwarder
// could not keep up with the Publishes, and on a busy machine it did.
func TestCloseWithBacklog(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	dir := t.TempDir()
	// A CloseTimeout Close never reaches: it waits for nsqd's answer to
	// the batch in flight.
	o := nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, CloseTimeout: 10 * time.Minute, Disk: diskqueue.Options{SyncEvery: diskqueue.DefaultSyncEvery}}
	p := openPublisherWith(t, dir, o)
	n := 20000
	if testing.Short() {
		n = 5000
	}
	ctx := context.Background()
	if err := p.Publish(ctx, msg(0)); err != nil {
		t.Fatal(err)
	}
	syncPublisher(t, p) // connected
	freeze(t, nsqd)
	for i := 1; i < n; i++ {
		if err := p.Publish(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	// A Sync waiting when Close begins returns once Close has stopped
	// forwarding; waiting is when it first asks its ctx for Done.
	sctx := &doneWatch{Context: ctx, asked: make(chan struct{})}
	synced := make(chan error, 1)
	go func() { synced <- p.Sync(sctx) }()
	<-sctx.asked
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	if err := <-synced; !errors.Is(err, nsqbridge.ErrClosed) {
		t.Fatalf("Sync with nsqd stopped: %v, want ErrClosed once Close began", err)
	}
	nsqd.cmd.Process.Signal(syscall.SIGCONT)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Forwarded > 1+nsqbridge.DefaultBatchSize || st.Forwarded+st.Pending != int64(n) {
		t.Fatalf("after Close: %d forwarded, %d pending; want at most the first and one batch forwarded, and %d in all", st.Forwarded, st.Pending, n)
	}
	if got := nsqd.stats("jobs").MessageCount; got != uint64(st.Forwarded) {
		t.Fatalf("nsqd has %d messages, the publisher forwarded %d", got, st.Forwarded)
	}
	t.Logf("Close left %d of %d pending", st.Pending, n)

	o.CloseTimeout = 0
	p = openPublisherWith(t, dir, o)
	defer p.Close()
	if got := p.Stats().Pending; got != st.Pending {
		t.Fatalf("reopened with %d pending, Close reported %d", got, st.Pending)
	}
	syncPublisher(t, p)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	if got := work(t, c, n); len(got) != n {
		t.Fatalf("received %d distinct of %d", len(got), n)
	}
}

// doneWatch is a context that closes asked the first time Done is called.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// TestCloseWithFrozenNSQD: nsqd stops answering (SIGSTOP) with a batch in
// flight. Close gives up waiting after CloseTimeout, not after go-nsq's
// read timeout (set here to 5 minutes, its most), and the unacknowledged messages
// are forwarded by the next publisher once nsqd runs again.
func TestCloseWithFrozenNSQD(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	dir := t.TempDir()
	cfg := nsq.NewConfig()
	cfg.ReadTimeout = 5 * time.Minute
	o := nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, NSQConfig: cfg, CloseTimeout: 100 * time.Millisecond}
	p := openPublisherWith(t, dir, o)
	ctx := context.Background()
	p.Publish(ctx, msg(0))
	syncPublisher(t, p) // connected
	// Stopped, not only signalled, or nsqd may still acknowledge the
	// first batch published below (1 run in 10).
	freeze(t, nsqd)
	const n = 500
	for i := 1; i < n; i++ {
		if err := p.Publish(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	closeWithinAMinute(t, p, "a frozen nsqd")
	if st := p.Stats(); st.Forwarded != 1 || st.Pending != n-1 {
		t.Fatalf("after Close: %+v, want 1 forwarded and %d pending", st, n-1)
	}
	nsqd.cmd.Process.Signal(syscall.SIGCONT)
	p = openPublisherWith(t, dir, o)
	defer p.Close()
	syncPublisher(t, p)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	if got := work(t, c, n); len(got) != n {
		t.Fatalf("received %d distinct of %d", len(got), n)
	}
}

// TestCloseWhileConnectingToFrozenNSQD: nsqd accepts the connection but
// never answers IDENTIFY (SIGSTOP before the publisher opens). Close gives
// up after CloseTimeout, not after go-nsq's read timeout (5 minutes here):
// it waited that long before, for the connect. The message put meanwhile
// is forwarded once nsqd runs again.
func TestCloseWhileConnectingToFrozenNSQD(t *testing.T) {
	t.Parallel()
	nsqd := startNSQD(t)
	freeze(t, nsqd)
	defer nsqd.cmd.Process.Signal(syscall.SIGCONT)
	dir := t.TempDir()
	cfg := nsq.NewConfig()
	cfg.ReadTimeout = 5 * time.Minute
	o := nsqbridge.PublisherOptions{NSQD: []string{nsqd.TCP}, NSQConfig: cfg, CloseTimeout: 100 * time.Millisecond}
	p := openPublisherWith(t, dir, o)
	if err := p.Publish(context.Background(), msg(0)); err != nil {
		t.Fatal(err)
	}
	// The node connects at Open; give it time to be inside go-nsq's wait.
	time.Sleep(200 * time.Millisecond)
	closeWithinAMinute(t, p, "a connect to a frozen nsqd")
	if st := p.Stats(); st.Forwarded != 0 || st.Pending != 1 {
		t.Fatalf("after Close: %+v, want 1 pending", st)
	}
	nsqd.cmd.Process.Signal(syscall.SIGCONT)
	p = openPublisherWith(t, dir, o)
	defer p.Close()
	syncPublisher(t, p)
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}})
	if got := work(t, c, 1); len(got) != 1 {
		t.Fatalf("received %d distinct of 1", len(got))
	}
}

// closeWithinAMinute closes p, failing the test if Close has not returned
// a minute later (waiting for what).
func closeWithinAMinute(t *testing.T, p *nsqbridge.Publisher, what string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("Close still waits for %s a minute later", what)
	}
}
