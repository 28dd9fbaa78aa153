//go:build unix

package nsqbridge_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/nsqbridge"
)

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
	nsqd.cmd.Process.Signal(syscall.SIGSTOP)
	// kill(2) returns before nsqd has stopped: wait for that, or it may
	// still acknowledge the first batch published below (1 run in 10).
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(nsqd.cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("waiting for nsqd to stop: %v (status %v)", err, ws)
	}
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
	nsqd.cmd.Process.Signal(syscall.SIGSTOP)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(nsqd.cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("waiting for nsqd to stop: %v (status %v)", err, ws)
	}
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
