package main

import (
	"bufio"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/spillq/spillq/internal/crashtest"
)

// asDemo is set in the environment of the processes the tests start: the
// test binary, run with it, is the demo. Linking a demo binary of its own
// took a second or two of every run.
const asDemo = "SPILLQ_DEMO_TEST_AS_DEMO"

// demoBin is the test binary itself.
var demoBin string

func TestMain(m *testing.M) {
	demoBin = crashtest.AsMain(asDemo, main)
	// The parallel tests are each a child process that runs for a set
	// time, mostly asleep: four at once on two cores, unless -parallel
	// says otherwise.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}

// buildDemo returns the demo binary: the test binary, which runs main in a
// child whose environment has asDemo set.
func buildDemo(t *testing.T) string {
	t.Helper()
	return demoBin
}

var summaryRE = regexp.MustCompile(`(?m)^summary produced=(\d+) finished=(\d+) spilled=(\d+) redelivered=(\d+) duplicates=(\d+) waiting=(\d+) lost=(\d+)$`)

type summary struct{ produced, finished, spilled, redelivered, duplicates, waiting, lost int }

func parseSummary(t *testing.T, out []byte) summary {
	t.Helper()
	m := summaryRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
	return summary{n(1), n(2), n(3), n(4), n(5), n(6), n(7)}
}

func TestDemoRuns(t *testing.T) {
	t.Parallel() // each demo test is a child process, mostly asleep
	bin := buildDemo(t)
	// A producer at 1000/s for 100 ms against one consumer at 20 ms a
	// message: a memory buffer of 1 overflows unless the producer puts
	// fewer than 3 messages in the consumer's first 20 ms, 50 times below
	// its rate, and the backlog drains in about 2 s. (2 producers at
	// 5000/s against 4 consumers at 1 ms a message did not spill on a busy
	// machine, the producers slowed to a quarter of their rate.)
	out, err := exec.Command(bin, "-duration", "250ms", "-producers", "1", "-rate", "1000", "-consumers", "1", "-mem", "1", "-work", "20ms").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := parseSummary(t, out)
	if s.produced == 0 || s.finished != s.produced || s.lost != 0 || s.duplicates != 0 || s.waiting != 0 {
		t.Fatalf("summary %+v\n%s", s, out)
	}
	if s.spilled == 0 {
		t.Fatalf("the demo did not spill: %+v", s)
	}
}

// TestDemoCrashAndRerun kills the demo with SIGKILL (its -crash-after) and
// runs it again on the same directory: with every Put on disk before it
// returns, nothing acknowledged may be lost.
func TestDemoCrashAndRerun(t *testing.T) {
	t.Parallel()
	bin := buildDemo(t)
	dir := filepath.Join(t.TempDir(), "q")
	args := []string{"-dir", dir, "-mem", "0", "-sync", "always", "-rate", "3000", "-duration", "3s"}
	out, err := exec.Command(bin, append(args, "-crash-after", "700ms")...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("crash run: want death by signal, got %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "demo-ledger")); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, append(args, "-duration", "1s")...).CombinedOutput()
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^recovered from `).Match(out) {
		t.Fatalf("rerun did not report recovery:\n%s", out)
	}
	if s := parseSummary(t, out); s.lost != 0 {
		t.Fatalf("lost %d after a crash with -mem 0 -sync always\n%s", s.lost, out)
	}
}

// TestDemoGracefulStop interrupts the demo as Ctrl-C does, with messages
// in its memory buffer and a backlog on disk: the stopped run must report
// nothing lost, and a rerun on the same directory must deliver every
// message it left, none of those it finished again. One consumer at 10 ms
// a message takes 10 s to empty a buffer of 1000 that the producers fill
// in 40 ms at their rate: with the defaults (4 consumers at 0.4 ms) the
// consumers kept up with producers a busy machine slowed down, and
// nothing waited.
func TestDemoGracefulStop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("os.Interrupt cannot be sent to a process on Windows")
	}
	t.Parallel()
	bin := buildDemo(t)
	dir := filepath.Join(t.TempDir(), "q")
	cmd := exec.Command(bin, "-dir", dir, "-plain", "-duration", "60s", "-consumers", "1", "-work", "10ms", "-mem", "1000")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	backlog := regexp.MustCompile(`memory=(\d+)/\d+ disk=[1-9]`)
	signalled := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		// Interrupt once messages wait both in memory and on disk: the
		// case that used to be reported as lost.
		if m := backlog.FindStringSubmatch(sc.Text()); !signalled && m != nil && m[1] != "0" {
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("interrupted run: %v\n%s", err, out.String())
	}
	if !signalled {
		t.Fatalf("no memory and disk backlog seen to interrupt:\n%s", out.String())
	}
	stopped := parseSummary(t, []byte(out.String()))
	if stopped.lost != 0 || stopped.waiting == 0 || stopped.waiting != stopped.produced-stopped.finished {
		t.Fatalf("after a graceful stop: %+v, want lost=0 and waiting=produced-finished\n%s", stopped, out.String())
	}
	if !strings.Contains(out.String(), "run again with -dir "+dir) {
		t.Fatalf("the stopped run does not say how to deliver what waits:\n%s", out.String())
	}

	// -work 0: the rerun is there to drain the backlog, which then takes
	// a fraction of a second rather than one and a half.
	rerun, err := exec.Command(bin, "-dir", dir, "-rate", "2000", "-duration", "1s", "-work", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, rerun)
	}
	if !regexp.MustCompile(`(?m)^recovered from .*: [1-9]\d* messages waiting on disk`).Match(rerun) {
		t.Fatalf("rerun did not recover a backlog:\n%s", rerun)
	}
	// lost counts messages of either run (the ledger knows both) that the
	// rerun, which drains the queue, never finished.
	if s := parseSummary(t, rerun); s.lost != 0 || s.waiting != 0 || s.duplicates != 0 || s.finished < stopped.waiting {
		t.Fatalf("rerun after a graceful stop: %+v, want everything the stopped run left (%d) finished once\n%s", s, stopped.waiting, rerun)
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	bin := buildDemo(t)
	for _, args := range [][]string{{"-sync", "sometimes"}, {"-producers", "0"}, {"-fail", "1.5"}, {"-topic", "-crash-after", "1s"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil {
			t.Fatalf("%v accepted:\n%s", args, out)
		}
	}
}

// TestDemoServesMetrics scrapes the running demo's -metrics-addr.
func TestDemoServesMetrics(t *testing.T) {
	t.Parallel()
	if body := scrapeDemo(t); !strings.Contains(body, `spillq_channel_memory_capacity{channel="",queue="demo"} 10000`) {
		t.Fatalf("scrape:\n%s", body)
	}
}

// scrapeDemo starts the demo with -metrics-addr and args, scrapes it once
// and kills it.
func scrapeDemo(t *testing.T, args ...string) string {
	t.Helper()
	return getDemo(t, "-metrics-addr", "metrics: ", "", args...)
}

// TestDemoServesNSQ reads the nsqd API the demo serves with
// -nsqd-http-address: the queue as a topic with one channel, and its
// health.
func TestDemoServesNSQ(t *testing.T) {
	t.Parallel()
	if body := getDemo(t, "-nsqd-http-address", "nsqd http api: ", ""); !strings.Contains(body, `"topic_name":"demo"`) || !strings.Contains(body, `"channel_name":"demo"`) {
		t.Fatalf("/stats:\n%s", body)
	}
	if body := getDemo(t, "-nsqd-http-address", "nsqd http api: ", "/healthz", "-topic"); !strings.Contains(body, `"status":`) {
		t.Fatalf("/healthz:\n%s", body)
	}
}

// getDemo starts the demo with addrFlag 127.0.0.1:0 and args, reads the
// URL it prints after prefix (with its path replaced by path, if not
// empty) once, and kills it.
func getDemo(t *testing.T, addrFlag, prefix, path string, args ...string) string {
	t.Helper()
	bin := buildDemo(t)
	// Long enough to be running whenever the scrape comes; killed after it.
	cmd := exec.Command(bin, append([]string{addrFlag, "127.0.0.1:0", "-duration", "60s", "-rate", "2000", "-plain"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	var url string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			url = strings.Fields(u)[0]
			break
		}
	}
	if url == "" {
		t.Fatalf("the demo did not print its address after %q", prefix)
	}
	if path != "" {
		host, _, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
		url = "http://" + host + path
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(body)
}

var topicSummaryRE = regexp.MustCompile(`(?m)^summary topic produced=(\d+) billing=(\d+) analytics=(\d+) duplicates=(\d+) waiting=(\d+) lost=(\d+)$`)

// TestDemoTopic runs the -topic mode: both channels finish every message,
// and the view shows each one's depth and lag.
func TestDemoTopic(t *testing.T) {
	t.Parallel()
	bin := buildDemo(t)
	// 2 producers at 2000/s for 800 ms: 3200 messages. Billing's 4
	// consumers take 2 ms a message, 2000/s, and drain in about 1.6 s;
	// analytics's, at 1000/s, in about 3.2 s.
	out, err := exec.Command(bin, "-topic", "-duration", "2s", "-rate", "2000", "-mem", "500", "-work", "2ms").CombinedOutput()
	if err != nil {
		t.Fatalf("demo -topic: %v\n%s", err, out)
	}
	m := topicSummaryRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no topic summary line in:\n%s", out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
	if produced := n(1); produced == 0 || n(2) != produced || n(3) != produced || n(4) != 0 || n(5) != 0 || n(6) != 0 {
		t.Fatalf("summary %q: want both channels to finish every message once", m[0])
	}
	// Each channel's depth and lag, not that analytics is behind at a
	// draw: that is a race of the producers, which a busy machine slowed
	// to a tenth of their rate (306 messages), against consumers that
	// sleep their work (a loaded machine does not slow them), and only a
	// run of many seconds would win it by a wide margin.
	for _, name := range []string{"billing", "analytics"} {
		if !regexp.MustCompile(`(?m)^  ` + name + ` +depth \d+  lag \S+  finished \d+ `).Match(out) {
			t.Fatalf("the view does not show %s's depth and lag:\n%s", name, out)
		}
	}
}

// TestDemoTopicServesMetrics scrapes the -topic mode's -metrics-addr: its
// channels' series carry their names.
func TestDemoTopicServesMetrics(t *testing.T) {
	t.Parallel()
	body := scrapeDemo(t, "-topic")
	for _, want := range []string{`spillq_channel_lag_records{channel="analytics",queue="demo"}`, `spillq_channel_memory_capacity{channel="billing",queue="demo"} 10000`} {
		if !strings.Contains(body, want) {
			t.Fatalf("scrape lacks %s:\n%s", want, body)
		}
	}
}
