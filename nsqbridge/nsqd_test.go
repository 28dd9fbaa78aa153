package nsqbridge_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/broadcast"
	"github.com/spillq/spillq/internal/crashtest"
	"github.com/spillq/spillq/internal/nsqbin"
)

// The tests run real nsqd and nsqlookupd servers, built from
// github.com/nsqio/nsq v1.3.0 in the tools module beside this package
// (internal/nsqtools, with nsq's own replace for go-svc), on free loopback
// ports. nsqbin keeps the binaries in the user cache directory, so only the
// first run for a toolchain links them.
var nsqdBin, lookupdBin string

func TestMain(m *testing.M) {
	if _, ok := crashtest.Dir(); ok {
		os.Exit(m.Run()) // a crash test's child: the parent built everything
	}
	var err error
	nsqdBin, lookupdBin, err = nsqbin.Build(filepath.Join("internal", "nsqtools"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// server is an nsqd or nsqlookupd process that can be killed and started
// again on the same ports and data.
type server struct {
	t        testing.TB
	bin      string
	args     []string
	ready    string // the log line that says it is listening
	cmd      *exec.Cmd
	drained  chan struct{} // closed when the log of the running process ends
	TCP      string
	HTTP     string
	dataPath string

	// mu guards logged: every log line of every run, in order.
	mu     sync.Mutex
	logged []string
	wrote  broadcast.Broadcast // a line was logged
}

func startNSQD(t testing.TB, extra ...string) *server {
	t.Helper()
	s := &server{t: t, bin: nsqdBin, TCP: freePort(t), HTTP: freePort(t), dataPath: nsqdDataDir(t), ready: "TCP: listening on"}
	s.args = append([]string{"--tcp-address=" + s.TCP, "--http-address=" + s.HTTP, "--data-path=" + s.dataPath}, extra...)
	s.start()
	t.Cleanup(s.kill)
	return s
}

// nsqdDataDir returns a directory for an nsqd's --data-path, on tmpfs
// (/dev/shm) where there is one. The tests kill nsqd, never the machine,
// and what a killed process wrote is in the page cache either way; but
// with --mem-queue-size=0 --sync-every=1 nsqd fsyncs and rewrites its
// metadata file for every message written and read, some 3 ms each on
// this disk: 2000 messages took 12 s, on tmpfs 0.5 s.
func nsqdDataDir(t testing.TB) string {
	t.Helper()
	if info, err := os.Stat("/dev/shm"); err != nil || !info.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "spillq-nsqd-")
	if err != nil {
		return t.TempDir() // not writable here
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startLookupd(t testing.TB) *server {
	t.Helper()
	s := &server{t: t, bin: lookupdBin, TCP: freePort(t), HTTP: freePort(t), ready: "TCP: listening on"}
	s.args = []string{"--tcp-address=" + s.TCP, "--http-address=" + s.HTTP}
	s.start()
	t.Cleanup(s.kill)
	return s
}

// start runs the server and returns once it logs that it listens.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		s.record(sc.Text())
		if strings.Contains(sc.Text(), s.ready) {
			s.drained = make(chan struct{})
			go func() { // keep reading its log
				defer close(s.drained)
				for sc.Scan() {
					s.record(sc.Text())
				}
			}()
			return
		}
	}
	s.cmd.Wait()
	s.t.Fatalf("%s did not start:\n%s", s.bin, strings.Join(seen, "\n"))
}

func (s *server) record(line string) {
	s.mu.Lock()
	s.logged = append(s.logged, line)
	s.mu.Unlock()
	s.wrote.Notify()
}

// waitLog waits until the server has logged n lines containing substr.
func (s *server) waitLog(substr string, n int) {
	s.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		wait := s.wrote.Wait()
		s.mu.Lock()
		count := 0
		for _, l := range s.logged {
			if strings.Contains(l, substr) {
				count++
			}
		}
		s.mu.Unlock()
		if count >= n {
			return
		}
		select {
		case <-wait:
		case <-timeout:
			s.t.Fatalf("%s logged %q %d times, want %d", s.bin, substr, count, n)
		}
	}
}

// topicStats is what nsqd's /stats says about a topic.
type topicStats struct {
	MessageCount uint64 `json:"message_count"`
	Depth        int64  `json:"depth"`
	Channels     []struct {
		Name          string `json:"channel_name"`
		Depth         int64  `json:"depth"`
		InFlight      int    `json:"in_flight_count"`
		DeferredCount int    `json:"deferred_count"`
		MessageCount  uint64 `json:"message_count"`
	} `json:"channels"`
}

// stats asks nsqd for its statistics of topic (zero if it has none).
func (s *server) stats(topic string) topicStats {
	s.t.Helper()
	resp, err := http.Get("http://" + s.HTTP + "/stats?format=json&topic=" + topic)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Topics []struct {
			Name string `json:"topic_name"`
			topicStats
		} `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		s.t.Fatal(err)
	}
	for _, t := range body.Topics {
		if t.Name == topic {
			return t.topicStats
		}
	}
	return topicStats{}
}

// scanChannel creates topic's channel on nsqd and restarts it, so that
// from then on nsqd times out the channel's in-flight messages within its
// 100 ms scan interval. nsqd scans the channels it had when it started,
// and looks for new ones only every 5 s (its queue-scan refresh interval,
// which no flag sets): on a channel created after the start, the first
// timeout waits for that. A graceful stop writes the channel into nsqd's
// metadata, and the restart loads it before it starts scanning.
func (s *server) scanChannel(topic, channel string) {
	s.t.Helper()
	for _, path := range []string{"/topic/create?topic=" + topic, "/channel/create?topic=" + topic + "&channel=" + channel} {
		resp, err := http.Post("http://"+s.HTTP+path, "", nil)
		if err != nil {
			s.t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			s.t.Fatalf("POST %s: %s", path, resp.Status)
		}
	}
	s.stop()
	s.start()
}

// stop stops the server gracefully (SIGTERM), if it runs.
func (s *server) stop() { s.end(syscall.SIGTERM) }

// kill SIGKILLs the server, if it runs.
func (s *server) kill() { s.end(syscall.SIGKILL) }

func (s *server) end(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(sig)
		<-s.drained
		s.cmd.Wait()
		s.cmd = nil
	}
}
