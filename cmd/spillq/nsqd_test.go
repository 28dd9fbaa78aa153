package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/nsqbin"
)

// buildNSQD builds nsqd v1.3.0 from the tools module beside nsqbridge
// (nsqbridge/internal/nsqtools), as nsqbridge's tests do, through the
// cache they share.
func buildNSQD(t *testing.T) string {
	t.Helper()
	bin, _, err := nsqbin.Build(filepath.Join("..", "..", "nsqbridge", "internal", "nsqtools"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// nsqdProc is a running nsqd.
type nsqdProc struct {
	cmd       *exec.Cmd
	tcp, http string
	dataPath  string
	stderr    bytes.Buffer // its log after the ready line
	logDone   chan struct{}
}

// startNSQD runs nsqd with every message going through its disk queue
// (--mem-queue-size=0) and returns once it logs that it listens; nsqd binds
// its TCP and HTTP listeners before it logs that.
func startNSQD(t *testing.T, bin string) *nsqdProc {
	t.Helper()
	p := &nsqdProc{tcp: freeAddr(t), http: freeAddr(t), dataPath: t.TempDir(), logDone: make(chan struct{})}
	p.cmd = exec.Command(bin, "--tcp-address="+p.tcp, "--http-address="+p.http, "--data-path="+p.dataPath, "--mem-queue-size=0")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stderr)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "TCP: listening on") {
			go func() {
				io.Copy(&p.stderr, stderr)
				close(p.logDone)
			}()
			return p
		}
	}
	p.cmd.Wait()
	t.Fatalf("nsqd did not start:\n%s", strings.Join(seen, "\n"))
	return nil
}

// stop sends SIGTERM, on which nsqd writes its in-flight messages to its
// disk queues and syncs them, and waits for it to exit.
func (p *nsqdProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.logDone
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("nsqd exited with %v:\n%s", err, p.stderr.String())
	}
}

func (p *nsqdProc) post(t *testing.T, path string, q url.Values, body []byte) {
	t.Helper()
	resp, err := http.Post("http://"+p.http+path+"?"+q.Encode(), "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", path, resp.Status, out)
	}
}

// waitForChannel waits until nsqd's topic pump has moved every message of
// topic into channel (the pump runs after /pub returns) and the channel
// holds want messages, none in flight: then the channel's disk queue holds
// them all.
func (p *nsqdProc) waitForChannel(t *testing.T, topic, channel string, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.http + "/stats?format=json&topic=" + url.QueryEscape(topic))
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Topics []struct {
				Name     string `json:"topic_name"`
				Depth    int    `json:"depth"`
				Channels []struct {
					Name     string `json:"channel_name"`
					Depth    int    `json:"depth"`
					InFlight int    `json:"in_flight_count"`
					Deferred int    `json:"deferred_count"`
				} `json:"channels"`
			} `json:"topics"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range st.Topics {
			for _, c := range tp.Channels {
				if tp.Name == topic && c.Name == channel {
					last = fmt.Sprintf("topic depth %d, channel depth %d, in flight %d, deferred %d", tp.Depth, c.Depth, c.InFlight, c.Deferred)
					if tp.Depth == 0 && c.Depth == want && c.InFlight == 0 && c.Deferred == 0 {
						return
					}
				}
			}
		}
		<-time.After(20 * time.Millisecond) // nsqd's pump is another process: poll
	}
	t.Fatalf("%s/%s never held %d messages at rest: %s", topic, channel, want, last)
}

// receiveAndRequeue takes one message of topic/channel over nsqd's TCP
// protocol and requeues it, so it goes back to the disk queue with one
// attempt counted.
func (p *nsqdProc) receiveAndRequeue(t *testing.T, topic, channel string) *nsq.Message {
	t.Helper()
	conn, err := net.Dial("tcp", p.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute)) // a hung nsqd fails the test rather than hanging it
	if _, err := conn.Write(nsq.MagicV2); err != nil {
		t.Fatal(err)
	}
	frame := func() (int32, []byte) {
		t.Helper()
		typ, data, err := nsq.ReadUnpackedResponse(conn)
		if err != nil {
			t.Fatal(err)
		}
		return typ, data
	}
	if _, err := nsq.Subscribe(topic, channel).WriteTo(conn); err != nil {
		t.Fatal(err)
	}
	if typ, data := frame(); typ != nsq.FrameTypeResponse || string(data) != "OK" {
		t.Fatalf("SUB: frame %d %q", typ, data)
	}
	if _, err := nsq.Ready(1).WriteTo(conn); err != nil {
		t.Fatal(err)
	}
	for {
		typ, data := frame()
		if typ != nsq.FrameTypeMessage {
			continue // a heartbeat
		}
		m, err := nsq.DecodeMessage(data)
		if err != nil {
			t.Fatal(err)
		}
		// RDY 0 first, so nsqd sends nothing more before the connection
		// closes.
		for _, c := range []*nsq.Command{nsq.Ready(0), nsq.Requeue(m.ID, 0)} {
			if _, err := c.WriteTo(conn); err != nil {
				t.Fatal(err)
			}
		}
		// Copy: the body aliases the frame buffer.
		m.Body = append([]byte(nil), m.Body...)
		return m
	}
}

// TestImportFromRealNSQD imports the disk queues of a real nsqd: a
// channel's backlog, with one message delivered and requeued before nsqd
// stopped, and a topic's with no channel. Bodies arrive without nsqd's
// 26-byte header, and each message keeps its nsqd ID, timestamp and
// attempts.
func TestImportFromRealNSQD(t *testing.T) {
	bin := buildNSQD(t)
	nsqd := startNSQD(t, bin)
	nsqd.post(t, "/topic/create", url.Values{"topic": {"orders"}}, nil)
	nsqd.post(t, "/channel/create", url.Values{"topic": {"orders"}, "channel": {"work"}}, nil)
	nsqd.post(t, "/topic/create", url.Values{"topic": {"events"}}, nil)
	bodies := []string{"order 0", "order 1 \x00\x01 binary\n", strings.Repeat("long order ", 20), "order 3", "x"}
	before := time.Now()
	for _, b := range bodies {
		nsqd.post(t, "/pub", url.Values{"topic": {"orders"}}, []byte(b))
		nsqd.post(t, "/pub", url.Values{"topic": {"events"}}, []byte("event: "+b))
	}
	after := time.Now()
	nsqd.waitForChannel(t, "orders", "work", len(bodies))
	requeued := nsqd.receiveAndRequeue(t, "orders", "work")
	nsqd.waitForChannel(t, "orders", "work", len(bodies))
	nsqd.stop(t)
	if string(requeued.Body) != bodies[0] || requeued.Attempts != 1 {
		t.Fatalf("nsqd delivered %q attempts %d first, want %q attempts 1", requeued.Body, requeued.Attempts, bodies[0])
	}

	dst := filepath.Join(t.TempDir(), "jobs")
	out, code := tool(t, "", "import-nsqd", "-name", "orders:work", "-from", nsqd.dataPath, "-create", "-channel", dst)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("imported %d messages", len(bodies))) || !strings.Contains(out, "IDs, timestamps and attempts kept") {
		t.Fatalf("import-nsqd of orders:work (%d):\n%s", code, out)
	}
	// dump decodes the envelopes without being told: bodies exactly as
	// published, the requeued one last with nsqd's ID.
	stdout, stderr, code := tool3(t, "", "dump", "-format", "json", dst)
	if code != 0 || stderr != "" {
		t.Fatalf("dump (%d):\n%s%s", code, stdout, stderr)
	}
	type dumpLine struct {
		ID       string `json:"id"`
		Attempts uint16 `json:"attempts"`
		Body     string `json:"body"`
	}
	var dumped []dumpLine
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var d dumpLine
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("dump line %q: %v", l, err)
		}
		dumped = append(dumped, d)
	}
	want := append(append([]string(nil), bodies[1:]...), bodies[0])
	if len(dumped) != len(want) {
		t.Fatalf("dumped %d records, want %d:\n%s", len(dumped), len(want), stdout)
	}
	for i, d := range dumped {
		if d.Body != want[i] {
			t.Errorf("record %d body %q, want %q", i, d.Body, want[i])
		}
	}
	last := dumped[len(dumped)-1]
	if last.ID != string(requeued.ID[:]) || last.Attempts != 1 {
		t.Fatalf("requeued message imported as id %s attempts %d, want nsqd's id %s attempts 1", last.ID, last.Attempts, requeued.ID[:])
	}

	// A spillq service consumes them: nsqd's IDs and timestamps, and the
	// attempt nsqd already counted.
	q, err := spillq.Open(dst, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	hexID := regexp.MustCompile(`^[0-9a-f]{16}$`)
	ids := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, wantBody := range want {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Body) != wantBody {
			t.Errorf("message %d: body %q, want %q", i, m.Body, wantBody)
		}
		ids[m.ID.String()] = true
		if i == len(want)-1 {
			if m.ID.String() != string(requeued.ID[:]) || m.Attempts != 2 || !m.Timestamp.Equal(time.Unix(0, requeued.Timestamp)) {
				t.Errorf("requeued message: id %s attempts %d timestamp %v; want id %s, attempts 2 (one in nsqd, this delivery), timestamp %v",
					m.ID, m.Attempts, m.Timestamp, requeued.ID[:], time.Unix(0, requeued.Timestamp))
			}
		} else if !hexID.MatchString(m.ID.String()) || m.Attempts != 1 || m.Timestamp.Before(before.Add(-time.Millisecond)) || m.Timestamp.After(after) {
			t.Errorf("message %d: id %s attempts %d timestamp %v; want nsqd's hex id, attempts 1, a timestamp from the publishing (%v to %v)",
				i, m.ID, m.Attempts, m.Timestamp, before, after)
		}
		m.Finish()
	}
	if len(ids) != len(want) {
		t.Errorf("%d distinct IDs among %d messages", len(ids), len(want))
	}

	// A topic with no channel keeps its messages in its own queue; raw
	// records take the bodies alone.
	topicDst := filepath.Join(t.TempDir(), "events")
	out, code = tool(t, "", "import-nsqd", "-name", "events", "-from", nsqd.dataPath, "-create", "-raw", topicDst)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("imported %d messages", len(bodies))) || !strings.Contains(out, "bodies only") {
		t.Fatalf("import-nsqd of events (%d):\n%s", code, out)
	}
	stdout, _, code = tool3(t, "", "dump", "-format", "json", topicDst)
	for i, b := range bodies {
		line, _ := json.Marshal("event: " + b)
		if code != 0 || !strings.Contains(stdout, `"body":`+string(line)) {
			t.Fatalf("topic record %d %q missing (%d):\n%s", i, b, code, stdout)
		}
	}
	if strings.Contains(stdout, `"id"`) {
		t.Fatalf("raw records decoded as channel messages:\n%s", stdout)
	}
}
