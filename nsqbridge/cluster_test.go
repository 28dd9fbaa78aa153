package nsqbridge_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/nsqbridge"
)

// startCluster starts an nsqlookupd and n nsqd nodes registered with it.
// The nodes write every message and its position to disk, so a SIGKILL of
// one loses nothing it acknowledged, and log every command they receive.
func startCluster(t *testing.T, n int) (*server, []*server) {
	t.Helper()
	lookupd := startLookupd(t)
	nodes := make([]*server, n)
	for i := range nodes {
		nodes[i] = startNSQD(t, "--lookupd-tcp-address="+lookupd.TCP, "--broadcast-address=127.0.0.1",
			"--mem-queue-size=0", "--sync-every=1", "--log-level=debug")
		_, port, _ := net.SplitHostPort(nodes[i].TCP)
		lookupd.waitLog("TCP:"+port+" ", 1) // registered
	}
	return lookupd, nodes
}

// TestClusterFailover: a publisher finds 2 nsqd nodes through nsqlookupd
// and spreads batches over both; one node is SIGKILLed mid-stream. The
// batch it was sending goes to the other node, which takes the whole
// stream until the killed node is started again and publishing goes on.
// The backlog drains and every accepted message is in the cluster.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	lookupd, nodes := startCluster(t, 2)
	p := openPublisherWith(t, t.TempDir(), nsqbridge.PublisherOptions{
		Lookupd: []string{lookupd.HTTP}, LookupdPollInterval: 100 * time.Millisecond, BatchSize: 20,
		Disk: diskqueue.Options{SyncEvery: diskqueue.DefaultSyncEvery},
	})
	defer p.Close()
	// Both connected before the first third: a node still connecting
	// while the other forwards all of it would never see an MPUB to wait
	// for below. Not looked for at Open, whose query of nsqlookupd waits
	// at most the poll interval, 100 ms, which a busy machine overran.
	waitConnectedNodes(t, p, 2)
	if st := p.Stats(); len(st.Nodes) != 2 || !st.Nodes[0].Discovered {
		t.Fatalf("nodes: %+v", st.Nodes)
	}
	n := 6000
	if testing.Short() {
		n = 3000
	}
	ctx := context.Background()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if err := p.Publish(ctx, msg(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0, n/3)
	nodes[0].waitLog("MPUB jobs", 1) // it takes part in forwarding the backlog
	nodes[0].kill()
	publish(n/3, 2*n/3)
	syncPublisher(t, p) // through the node left
	st := p.Stats()
	t.Logf("with one node killed: forwarded %d, send errors %d, connect errors %d, failovers %d, nodes %+v",
		st.Forwarded, st.SendErrors, st.ConnectErrors, st.Failovers, st.Nodes)
	if st.Failovers == 0 || st.SendErrors == 0 || st.Pending != 0 || st.Forwarded != int64(2*n/3) {
		t.Fatalf("after the kill: %+v", st)
	}
	nodes[0].start()
	_, port, _ := net.SplitHostPort(nodes[0].TCP)
	lookupd.waitLog("TCP:"+port+" ", 2) // registered again
	// Rediscovered and connected before the last third, or the node left
	// can forward all of it before the next lookupd poll finds the other.
	waitConnectedNodes(t, p, 2)
	publish(2*n/3, n)
	syncPublisher(t, p)
	if st := p.Stats(); st.Pending != 0 || st.Forwarded != int64(n) {
		t.Fatalf("after the restart: %+v", st)
	}
	// Before anyone consumes, each node's topic holds what it took (on
	// disk, so the killed node kept what it had acknowledged).
	var held int64
	for _, node := range nodes {
		got := node.stats("jobs").Depth
		if got == 0 {
			t.Fatalf("node %s holds no messages: batches did not spread", node.TCP)
		}
		held += got
	}
	// nsqd's own disk queue answers a write before it syncs its metadata
	// (even with --sync-every=1, the sync comes at its next loop), so the
	// one message it acknowledged last before the SIGKILL can vanish
	// inside nsqd, out of any publisher's reach.
	const nsqdMayLose = 1
	if held < int64(n-nsqdMayLose) {
		t.Fatalf("the nodes hold %d messages, want at least %d", held, n-nsqdMayLose)
	}
	// Reading with an fsync per message would take a second per 500: restart
	// the nodes (gracefully, so they keep everything) without it.
	for _, node := range nodes {
		node.stop()
		node.args = slices.DeleteFunc(node.args, func(a string) bool { return a == "--sync-every=1" })
		node.start()
	}
	// One consumer per node: go-nsq v1.1.0's consumer of both, on
	// connecting the second, may offer it RDY before it lowers the
	// first's, find MaxInFlight spent and retry only after 5 s.
	c := merge(t,
		newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nodes[0].TCP}}),
		newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nodes[1].TCP}}))
	if got := work(t, c, n-nsqdMayLose); len(got) < n-nsqdMayLose {
		t.Fatalf("received %d distinct of %d", len(got), n)
	}
}

// merged receives from several receivers, whichever has a message.
type merged chan *channel.Message

// merge returns a Receiver of what rs receive. Each has a goroutine that
// receives the next message for it, until the test ends.
func merge(t *testing.T, rs ...channel.Receiver) merged {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	m := make(merged)
	for _, r := range rs {
		wg.Go(func() {
			for {
				msg, err := r.Receive(ctx)
				if err != nil {
					return
				}
				select {
				case m <- msg:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	return m
}

func (m merged) Receive(ctx context.Context) (*channel.Message, error) {
	select {
	case msg := <-m:
		return msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitConnectedNodes polls p until want nodes are connected.
func waitConnectedNodes(t *testing.T, p *nsqbridge.Publisher, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().ConnectedNodes != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes connected after 30 s, want %d: %+v", p.Stats().ConnectedNodes, want, p.Stats().Nodes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStaticNodesOneDown: of a static list of two nodes, one never
// answers; the other takes every batch and the publisher reports the dead
// one as not connected.
func TestStaticNodesOneDown(t *testing.T) {
	t.Parallel()
	live, dead := startNSQD(t), freePort(t)
	p := openPublisherWith(t, t.TempDir(), nsqbridge.PublisherOptions{NSQD: []string{dead, live.TCP}, BatchSize: 10})
	defer p.Close()
	const n = 300
	for i := 0; i < n; i++ {
		if err := p.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	syncPublisher(t, p)
	st := p.Stats()
	if st.Forwarded != n || st.ConnectedNodes != 1 || len(st.Nodes) != 2 {
		t.Fatalf("stats %+v", st)
	}
	for _, node := range st.Nodes {
		if node.Discovered || node.Connected != (node.Addr == live.TCP) {
			t.Fatalf("node %+v", node)
		}
	}
	if got := live.stats("jobs").MessageCount; got != n {
		t.Fatalf("the live node took %d of %d", got, n)
	}
}
