package nsqhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/nsqbin"
)

var (
	adminOnce sync.Once
	adminBin  string
	adminErr  error
)

// startNsqadmin builds nsqadmin from nsq v1.3.0 (the tools module the
// nsqd tests use) and starts it on loopback watching the nsqd HTTP
// address nsqd; it returns nsqadmin's base URL. It fails the test, never
// skips it, when nsqadmin cannot be built or started.
func startNsqadmin(t *testing.T, nsqd string) string {
	t.Helper()
	adminOnce.Do(func() {
		adminBin, adminErr = nsqbin.Nsqadmin(filepath.Join("..", "nsqbridge", "internal", "nsqtools"))
	})
	if adminErr != nil {
		t.Fatal(adminErr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(adminBin, "--http-address="+addr, "--nsqd-http-address="+nsqd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logged []string
	done := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("nsqadmin's log:\n%s", strings.Join(logged, "\n"))
			mu.Unlock()
		}
	})
	ready := make(chan bool, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logged = append(logged, sc.Text())
			mu.Unlock()
			if strings.Contains(sc.Text(), "HTTP: listening on") {
				select {
				case ready <- true:
				default:
				}
			}
		}
		ready <- false
	}()
	if !<-ready {
		t.Fatal("nsqadmin exited before listening")
	}
	return "http://" + addr
}

// adminDo sends an nsqadmin API request and decodes its JSON answer into
// out (when not nil); it returns the status.
func adminDo(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, url, err, b)
		}
	}
	if resp.StatusCode != http.StatusOK {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// adminChannel is nsqadmin's /api/topics/T/C answer, in part.
type adminChannel struct {
	Depth        int64  `json:"depth"`
	MemoryDepth  int64  `json:"memory_depth"`
	BackendDepth int64  `json:"backend_depth"`
	Paused       bool   `json:"paused"`
	ClientCount  int    `json:"client_count"`
	Message      string `json:"message"`
}

// action posts an action to nsqadmin, which answers 200 whether or not
// the node carried it out; its message is a WARNING when it did not.
func action(t *testing.T, url, act string) string {
	t.Helper()
	var resp struct {
		Message string `json:"message"`
	}
	if code := adminDo(t, "POST", url, `{"action":"`+act+`"}`, &resp); code != http.StatusOK {
		t.Fatalf("POST %s %s: %d", url, act, code)
	}
	return resp.Message
}

// TestNsqadmin runs nsqadmin v1.3.0 against the handler and checks,
// through nsqadmin's own API, that it lists the queues and topics with
// their depths and that its pause, empty and delete take effect.
func TestNsqadmin(t *testing.T) {
	f := newFixture(t, false)
	admin := startNsqadmin(t, strings.TrimPrefix(f.srv.URL, "http://"))

	// Its web UI is in the binary.
	for _, path := range []string{"/", "/static/main.js"} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(b) < 100 {
			t.Fatalf("nsqadmin %s: %d, %d bytes: the UI is not served", path, resp.StatusCode, len(b))
		}
	}

	var nodes struct {
		Nodes []struct {
			Hostname         string `json:"hostname"`
			BroadcastAddress string `json:"broadcast_address"`
			HTTPPort         int    `json:"http_port"`
			Version          string `json:"version"`
			Topics           []struct {
				Topic string `json:"topic"`
			} `json:"topics"`
		} `json:"nodes"`
		Message string `json:"message"`
	}
	if code := adminDo(t, "GET", admin+"/api/nodes", "", &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 || nodes.Message != "" {
		t.Fatalf("/api/nodes: %d %+v", code, nodes)
	}
	if n := nodes.Nodes[0]; n.Hostname != "testhost" || len(n.Topics) != 2 || n.Topics[0].Topic != "events" || n.Topics[1].Topic != "jobs" {
		t.Fatalf("/api/nodes: %+v", n)
	}
	var topics struct {
		Topics []string `json:"topics"`
	}
	if code := adminDo(t, "GET", admin+"/api/topics", "", &topics); code != http.StatusOK || strings.Join(topics.Topics, ",") != "events,jobs" {
		t.Fatalf("/api/topics: %d %+v", code, topics)
	}
	var topic struct {
		Depth    int64 `json:"depth"`
		Channels []struct {
			ChannelName string `json:"channel_name"`
			Depth       int64  `json:"depth"`
		} `json:"channels"`
		Message string `json:"message"`
	}
	if code := adminDo(t, "GET", admin+"/api/topics/events", "", &topic); code != http.StatusOK || topic.Message != "" || len(topic.Channels) != 2 {
		t.Fatalf("/api/topics/events: %d %+v", code, topic)
	}
	for _, c := range topic.Channels {
		if c.Depth != 3 {
			t.Fatalf("/api/topics/events: channel %s depth %d, want 3", c.ChannelName, c.Depth)
		}
	}
	var ch adminChannel
	if code := adminDo(t, "GET", admin+"/api/topics/jobs/jobs", "", &ch); code != http.StatusOK || ch.Depth != 5 || ch.MemoryDepth+ch.BackendDepth != 5 || ch.ClientCount != 1 || ch.Message != "" {
		t.Fatalf("/api/topics/jobs/jobs: %d %+v", code, ch)
	}

	// Pause and unpause a queue, and check the queue itself: nsqadmin
	// answers 200 even when the node refused.
	if msg := action(t, admin+"/api/topics/jobs/jobs", "pause"); msg != "" || !f.jobs.Stats().Paused {
		t.Fatalf("pause through nsqadmin: %q, queue paused %v", msg, f.jobs.Stats().Paused)
	}
	if adminDo(t, "GET", admin+"/api/topics/jobs/jobs", "", &ch); !ch.Paused {
		t.Fatalf("nsqadmin does not show the queue paused: %+v", ch)
	}
	if msg := action(t, admin+"/api/topics/jobs/jobs", "unpause"); msg != "" || f.jobs.Stats().Paused {
		t.Fatalf("unpause through nsqadmin: %q, queue paused %v", msg, f.jobs.Stats().Paused)
	}
	// A finished message gives the channel latency percentiles, which
	// nsqadmin must read without falling over.
	m, err := f.jobs.Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if msg := action(t, admin+"/api/topics/jobs/jobs", "empty"); msg != "" || f.jobs.Depth() != 0 {
		t.Fatalf("empty through nsqadmin: %q, queue depth %d", msg, f.jobs.Depth())
	}
	if code := adminDo(t, "GET", admin+"/api/topics/jobs/jobs", "", &ch); code != http.StatusOK || ch.Depth != 0 {
		t.Fatalf("/api/topics/jobs/jobs after empty: %d %+v", code, ch)
	}

	// A topic pause reaches the topic's open channel.
	billing, err := f.events.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msg := action(t, admin+"/api/topics/events", "pause"); msg != "" || !billing.Stats().Paused {
		t.Fatalf("topic pause through nsqadmin: %q, billing paused %v", msg, billing.Stats().Paused)
	}
	if msg := action(t, admin+"/api/topics/events", "unpause"); msg != "" || billing.Stats().Paused {
		t.Fatalf("topic unpause through nsqadmin: %q, billing paused %v", msg, billing.Stats().Paused)
	}
	// Delete a topic's channel.
	var del struct {
		Message string `json:"message"`
	}
	if code := adminDo(t, "DELETE", admin+"/api/topics/events/audit", "", &del); code != http.StatusOK || del.Message != "" {
		t.Fatalf("DELETE /api/topics/events/audit: %d %+v", code, del)
	}
	if chs := f.events.Channels(); len(chs) != 1 || chs[0] != "billing" {
		t.Fatalf("channels after nsqadmin's delete: %v", chs)
	}
	// nsqadmin is still up, and lists what is left.
	if code := adminDo(t, "GET", admin+"/api/nodes", "", &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 {
		t.Fatalf("/api/nodes at the end: %d %+v", code, nodes)
	}
}

// TestNsqadminReadOnly: with a read-only handler nsqadmin's actions come
// back as warnings and change nothing.
func TestNsqadminReadOnly(t *testing.T) {
	f := newFixture(t, true)
	admin := startNsqadmin(t, strings.TrimPrefix(f.srv.URL, "http://"))
	for _, act := range []string{"pause", "empty"} {
		if msg := action(t, admin+"/api/topics/jobs/jobs", act); !strings.Contains(msg, "READ_ONLY") {
			t.Fatalf("%s through nsqadmin on a read-only handler: message %q, want a READ_ONLY warning", act, msg)
		}
	}
	if st := f.jobs.Stats(); st.Paused || f.jobs.Depth() != 5 {
		t.Fatalf("read-only handler changed the queue: paused %v, depth %d", st.Paused, f.jobs.Depth())
	}
}
