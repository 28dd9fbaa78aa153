package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/crashtest"

	godiskqueue "github.com/nsqio/go-diskqueue"
	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// asTool is set in the environment of the processes the tests start: the
// test binary, run with it, is the spillq tool. Linking a tool binary of
// its own took a second of every run.
const asTool = "SPILLQ_TOOL_TEST_AS_TOOL"

// bin is the tool: the test binary itself.
var bin string

func TestMain(m *testing.M) {
	bin = crashtest.AsMain(asTool, main)
	os.Exit(m.Run())
}

// tool runs the binary and returns its stdout+stderr and exit status.
func tool(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	stdout, stderr, code := tool3(t, stdin, args...)
	return stdout + stderr, code
}

// tool3 runs the binary and returns its stdout, its stderr and its exit
// status.
func tool3(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

func fixture(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	q, err := diskqueue.Open(dir, diskqueue.Options{MaxSegmentBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		q.Put(context.Background(), []byte(fmt.Sprintf("record %d", i)))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadCommandsBesideAnOpenQueue(t *testing.T) {
	dir := fixture(t, 100)
	// A service has the queue open: the read-only commands still work.
	q, err := diskqueue.Open(dir, diskqueue.Options{MaxSegmentBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	out, code := tool(t, "", "stat", dir)
	if code != 0 || !strings.Contains(out, "depth      100") || !strings.Contains(out, "writePos   seq 100") {
		t.Fatalf("stat (%d):\n%s", code, out)
	}
	out, code = tool(t, "", "dump", "-from", "10", "-limit", "3", dir)
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, `"record 10"`) || !strings.Contains(out, `"record 12"`) {
		t.Fatalf("dump (%d):\n%s", code, out)
	}
	out, code = tool(t, "", "get", "-format", "json", dir, "42")
	if code != 0 || !strings.Contains(out, `"body":"record 42"`) || !strings.Contains(out, `"seq":42`) {
		t.Fatalf("get (%d):\n%s", code, out)
	}
	out, code = tool(t, "", "get", "-format", "hex", dir, "7")
	if code != 0 || !strings.Contains(out, "|record 7|") {
		t.Fatalf("get hex (%d):\n%s", code, out)
	}
	if out, code = tool(t, "", "get", dir, "100"); code != 1 || !strings.Contains(out, "not found") {
		t.Fatalf("get past the end (%d):\n%s", code, out)
	}
	if out, code = tool(t, "", "verify", dir); code != 0 || !strings.Contains(out, "checked 100 records") {
		t.Fatalf("verify (%d):\n%s", code, out)
	}
	// The write commands need the lock and say so.
	if out, code = tool(t, "x\n", "put", dir); code != 1 || !strings.Contains(out, "stop it first") {
		t.Fatalf("put on a locked queue (%d):\n%s", code, out)
	}
}

func TestDumpSince(t *testing.T) {
	dir := t.TempDir()
	// Each record from a queue of its own, whose first Put reads the
	// clock: one queue may stamp a record with a reading taken before an
	// earlier Put (diskqueue's clock.go), and on a busy machine that
	// reading was older than a mid taken with sleeps of 20 ms around it.
	// mid lies between the two stamps, whatever they are.
	put := func(body string) time.Time {
		t.Helper()
		q, err := diskqueue.Open(dir, diskqueue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		seq, err := q.PutSeq(context.Background(), []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := q.ReadAt(seq)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Time
	}
	old, recent := put("old"), put("new")
	if !recent.After(old) {
		t.Fatalf("the later record is stamped %v, the earlier %v", recent, old)
	}
	mid := old.Add(max(recent.Sub(old)/2, 1))
	out, code := tool(t, "", "dump", "-since", mid.UTC().Format(time.RFC3339Nano), dir)
	if code != 0 || strings.Contains(out, `"old"`) || !strings.Contains(out, `"new"`) {
		t.Fatalf("dump -since (%d):\n%s", code, out)
	}
}

func TestVerifyCatchesAFlippedByte(t *testing.T) {
	dir := fixture(t, 50)
	name := filepath.Join(dir, "00000000000000000000.log")
	b, _ := os.ReadFile(name)
	b[60] ^= 0x40
	os.WriteFile(name, b, 0o644)
	out, code := tool(t, "", "verify", dir)
	if code != 1 || !strings.Contains(out, "PROBLEM 00000000000000000000.log") || !strings.Contains(out, "checksum mismatch") {
		t.Fatalf("verify of a flipped byte (%d):\n%s", code, out)
	}
}

func TestRepairFixesATornTail(t *testing.T) {
	dir := fixture(t, 5)
	name := filepath.Join(dir, "00000000000000000000.log")
	f, _ := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0, 0, 0, 40, 1, 2, 3}) // half a record
	f.Close()
	// Half a record at the end is what a live writer leaves mid-copy as
	// much as what a crash leaves: a note, not a problem.
	if out, code := tool(t, "", "verify", dir); code != 0 || !strings.Contains(out, "7 bytes after the last record") {
		t.Fatalf("verify before repair (%d):\n%s", code, out)
	}
	out, code := tool(t, "", "repair", dir)
	if code != 0 || !strings.Contains(out, "cut a torn write") || !strings.Contains(out, "repaired: 5 records") {
		t.Fatalf("repair (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "verify", dir); code != 0 {
		t.Fatalf("verify after repair (%d):\n%s", code, out)
	}
}

// TestRepairRebuildsASealedIndex: repair left a sealed segment's damaged
// index as it was, reporting a problem it could not fix (a user's trial):
// Open recovers only the last segment, and the others' indexes are
// rebuilt on first use, which repair never made.
func TestRepairRebuildsASealedIndex(t *testing.T) {
	dir := fixture(t, 200) // segments of 1 KiB: the first is sealed
	// The first index's magic.
	flipIn(t, filepath.Join(dir, "00000000000000000000.index"), 0)
	if out, code := tool(t, "", "verify", dir); code != 1 || !strings.Contains(out, "00000000000000000000.index") {
		t.Fatalf("verify before repair (%d):\n%s", code, out)
	}
	out, code := tool(t, "", "repair", dir)
	if code != 0 || !strings.Contains(out, "rebuilt the indexes of a sealed segment") || !strings.Contains(out, "repaired: 200 records") {
		t.Fatalf("repair (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "verify", dir); code != 0 {
		t.Fatalf("verify after repair (%d):\n%s", code, out)
	}
}

func TestPutDrainAndTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if out, code := tool(t, "one\ntwo\nthree\n", "put", "-create", "-raw", dir); code != 0 || !strings.Contains(out, "put 3 records") {
		t.Fatalf("put (%d):\n%s", code, out)
	}
	out, code := tool(t, "", "drain", "-limit", "2", dir)
	if code != 0 || !strings.Contains(out, `"one"`) || !strings.Contains(out, `"two"`) || strings.Contains(out, `"three"`) {
		t.Fatalf("drain (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "stat", dir); !strings.Contains(out, "depth      1 ") {
		t.Fatalf("drain did not acknowledge:\n%s", out)
	}
	// tail follows what is written after it starts.
	cmd := exec.Command(bin, "tail", "-count", "2", dir)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		tool(t, fmt.Sprintf("later %d\n", i), "put", dir)
		select {
		case err := <-done:
			if err != nil || strings.Count(buf.String(), "later") != 2 {
				t.Fatalf("tail: %v\n%s", err, buf.String())
			}
			return
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("tail saw nothing:\n%s", buf.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestChannelRecords: -channel puts messages a spillq service consumes;
// later puts and dumps find out by themselves that the queue holds them.
func TestChannelRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if out, code := tool(t, "job A\n", "put", "-create", "-channel", dir); code != 0 {
		t.Fatalf("put -channel (%d):\n%s", code, out)
	}
	if out, code := tool(t, "job B\n", "put", dir); code != 0 || !strings.Contains(out, "channel messages") {
		t.Fatalf("put into a channel queue (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "dump", dir); !strings.Contains(out, `attempts=0`) || !strings.Contains(out, `"job B"`) {
		t.Fatalf("dump of a channel queue:\n%s", out)
	}
	q, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, want := range []string{"job A", "job B"} {
		m, err := q.Receive(context.Background())
		if err != nil || string(m.Body) != want {
			t.Fatalf("service received %q, %v; want %q", m.Body, err, want)
		}
		m.Finish()
	}
}

// TestImportNSQD imports a queue written by go-diskqueue itself, part of it
// already consumed, across several of its data files.
func TestImportNSQD(t *testing.T) {
	src := t.TempDir()
	dq := godiskqueue.New("orders", src, 256, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
	for i := 0; i < 40; i++ {
		if err := dq.Put([]byte(fmt.Sprintf("order %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 7; i++ {
		<-dq.ReadChan()
	}
	// go-diskqueue answers Depth on the loop that hands out messages, so
	// the reads above are counted by now.
	if d := dq.Depth(); d != 33 {
		t.Fatalf("go-diskqueue depth %d, want 33", d)
	}
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "q")
	// Bodies go-diskqueue stored directly are not nsqd messages: the
	// default decoding refuses them and writes nothing.
	out, code := tool(t, "", "import-nsqd", "-name", "orders", "-from", src, "-create", "-raw", dst)
	if code != 1 || !strings.Contains(out, "not nsqd's message format") || !strings.Contains(out, "-source raw") {
		t.Fatalf("import-nsqd of raw bodies as nsqd messages (%d):\n%s", code, out)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a refused import left %s behind: %v", dst, err)
	}
	out, code = tool(t, "", "import-nsqd", "-name", "orders", "-from", src, "-source", "raw", "-create", "-raw", dst)
	if code != 0 || !strings.Contains(out, "imported 33 messages") {
		t.Fatalf("import-nsqd (%d):\n%s", code, out)
	}
	out, _ = tool(t, "", "dump", dst)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 33 || !strings.Contains(lines[0], `"order 7"`) || !strings.Contains(lines[32], `"order 39"`) {
		t.Fatalf("imported records:\n%s", out)
	}
	if _, code := tool(t, "", "import-nsqd", "-name", "missing", "-source", "raw", "-from", src, dst); code != 1 {
		t.Fatal("import of a missing queue did not fail")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"stat"}, {"get", "dir"}, {"dump", "-format", "xml", "dir"}, {"import-nsqd", "dir"}} {
		if out, code := tool(t, "", args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		stdout, stderr, code := tool3(t, "", args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: spillq COMMAND") || !strings.Contains(stdout, "import-nsqd") {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"dump", "-h"}, {"help", "dump"}, {"dump", "DIR", "--help"}} {
		stdout, stderr, code := tool3(t, "", args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: spillq dump") || !strings.Contains(stdout, "-since") || !strings.Contains(stdout, "-raw") {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
	if stdout, _, code := tool3(t, "", "repair", "-h"); code != 0 || !strings.Contains(stdout, "-ack-bad") {
		t.Fatalf("repair -h (%d):\n%s", code, stdout)
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	dir := fixture(t, 30)
	out, code := tool(t, "", "get", dir, "17", "-format", "json")
	if code != 0 || !strings.Contains(out, `"seq":17`) || !strings.Contains(out, `"body":"record 17"`) {
		t.Fatalf("get DIR 17 -format json (%d):\n%s", code, out)
	}
	out, code = tool(t, "", "dump", dir, "-from", "5", "-limit", "2")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"record 5"`) || !strings.Contains(out, `"record 6"`) {
		t.Fatalf("dump DIR -from 5 -limit 2 (%d):\n%s", code, out)
	}
	// After "--" everything is an argument, even what looks like a flag.
	if out, code := tool(t, "", "get", "-format", "json", "--", dir, "-raw"); code != 2 || !strings.Contains(out, `"-raw" is not a sequence number`) {
		t.Fatalf("get -- DIR -raw (%d):\n%s", code, out)
	}
}

func TestNotAQueue(t *testing.T) {
	parent := t.TempDir()
	q := filepath.Join(parent, "q")
	if out, code := tool(t, "a\n", "put", "-create", "-raw", q); code != 0 {
		t.Fatalf("put -create (%d):\n%s", code, out)
	}
	// A directory with unrelated .log files, like /tmp.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "build.log"), []byte("compiling\n"), 0o644)
	empty := t.TempDir()
	missing := filepath.Join(parent, "typo")
	for _, c := range []struct {
		args []string
		dir  string
		want string
	}{
		{[]string{"stat", parent}, parent, "is not a spillq queue"},
		{[]string{"stat", other}, other, "is not a spillq queue"},
		{[]string{"verify", empty}, empty, "is not a spillq queue"},
		{[]string{"dump", missing}, missing, "no such directory"},
		{[]string{"get", other, "0"}, other, "is not a spillq queue"},
		{[]string{"tail", empty}, empty, "is not a spillq queue"},
		{[]string{"repair", missing}, missing, "no such directory"},
		{[]string{"drain", missing}, missing, "no such directory"},
		{[]string{"repair", empty}, empty, "is not a spillq queue"},
		{[]string{"put", "-raw", missing}, missing, "pass -create"},
		{[]string{"put", "-raw", empty}, empty, "pass -create"},
		{[]string{"put", "-raw", "-create", other}, other, "holds other files"},
	} {
		stdout, stderr, code := tool3(t, "x\n", c.args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, c.dir) || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q naming the directory", c.args, code, stdout, stderr, c.want)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a refused command made %s: %v", missing, err)
	}
	for _, d := range []string{empty, other} {
		if entries, _ := os.ReadDir(d); len(entries) > 1 || len(entries) == 1 && entries[0].Name() != "build.log" {
			t.Errorf("a refused command wrote into %s: %v", d, entries)
		}
	}
	// -create makes a queue in an empty directory.
	if out, code := tool(t, "x\n", "put", "-raw", "-create", empty); code != 0 || !strings.Contains(out, "put 1 records") {
		t.Fatalf("put -create into an empty directory (%d):\n%s", code, out)
	}
}

// TestDumpShowsDue: a timer store's records carry their due time, and dump
// shows it, as text and as JSON.
func TestDumpShowsDue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	sq, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour)
	if err := sq.PutWith(context.Background(), []byte("later"), channel.PutOptions{Delay: time.Until(due)}); err != nil {
		t.Fatal(err)
	}
	if err := sq.Close(); err != nil {
		t.Fatal(err)
	}
	timers := filepath.Join(dir, spillq.TimersDir)
	out, code := tool(t, "", "dump", timers)
	if code != 0 || !strings.Contains(out, " due="+due.UTC().Format("2006-01-02T15")) || !strings.Contains(out, `"later"`) {
		t.Fatalf("dump of the timer store (%d) does not show the due time:\n%s", code, out)
	}
	out, code = tool(t, "", "dump", "-format", "json", timers)
	if code != 0 || !strings.Contains(out, `"due":"`+due.UTC().Format("2006-01-02T15")) {
		t.Fatalf("dump -format json of the timer store (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "dump", dir); strings.Contains(out, "due=") {
		t.Fatalf("the main log's records carry no due time:\n%s", out)
	}
}

// TestRecordKindDetection: channel envelopes are decoded without -channel,
// raw bodies are not, even ones that start like an envelope; -raw and
// -channel override.
func TestRecordKindDetection(t *testing.T) {
	chq := filepath.Join(t.TempDir(), "ch")
	sq, err := spillq.Open(chq, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"job 1", "job 2"} {
		if err := sq.Put(context.Background(), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sq.Close(); err != nil {
		t.Fatal(err)
	}
	out, code := tool(t, "", "dump", chq)
	if code != 0 || !strings.Contains(out, "attempts=0\t\"job 1\"") || !strings.Contains(out, `"job 2"`) {
		t.Fatalf("dump of a spillq.Open queue (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "stat", chq); !strings.Contains(out, "records    channel messages") {
		t.Fatalf("stat of a spillq.Open queue:\n%s", out)
	}
	out, code = tool(t, "", "get", "-raw", "-format", "hex", chq, "0")
	if code != 0 || !strings.Contains(out, "25 bytes") || strings.Contains(out, "id=") {
		t.Fatalf("get -raw shows the stored envelope (%d):\n%s", code, out)
	}

	// A raw body that starts with an envelope's version and flags bytes but
	// whose "put time" is no time a channel could have written.
	rawq := t.TempDir()
	dq, err := diskqueue.Open(rawq, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lookalike := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0}, []byte("\xff\xff\xff\xff\xff\xff\xff\xfftail")...)
	dq.Put(context.Background(), lookalike)
	dq.Put(context.Background(), []byte("plain text"))
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	out, code = tool(t, "", "dump", "-format", "json", rawq)
	if code != 0 || strings.Contains(out, `"id"`) || !strings.Contains(out, `"body":"plain text"`) {
		t.Fatalf("dump of a raw queue (%d):\n%s", code, out)
	}
	// Forcing -channel on it reports the body that does not decode.
	stdout, stderr, code := tool3(t, "", "dump", "-channel", rawq)
	if code != 1 || !strings.Contains(stderr, "seq 1: record is not a channel message") || !strings.Contains(stdout, `"plain text"`) {
		t.Fatalf("dump -channel of a raw queue (%d):\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// Writers keep to what the queue holds.
	if out, code := tool(t, "x\n", "put", "-channel", rawq); code != 1 || !strings.Contains(out, "holds raw bodies") {
		t.Fatalf("put -channel into a raw queue (%d):\n%s", code, out)
	}
	emptyq := filepath.Join(t.TempDir(), "e")
	if out, code := tool(t, "", "put", "-create", "-raw", emptyq); code != 0 {
		t.Fatalf("put -create -raw (%d):\n%s", code, out)
	}
	if out, code := tool(t, "x\n", "put", emptyq); code != 2 || !strings.Contains(out, "-channel") {
		t.Fatalf("put into a queue with no records, no -channel or -raw (%d):\n%s", code, out)
	}
}

// flip flips a bit at byte off of the first segment's log. In a fixture
// (fixture(t, …)) seqs 0 to 9 are 33-byte frames from offset 16 on.
func flip(t *testing.T, dir string, off int) {
	t.Helper()
	flipIn(t, filepath.Join(dir, "00000000000000000000.log"), off)
}

// flipIn flips a bit of the byte at off in the file name.
func flipIn(t *testing.T, name string, off int) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDumpJSONReportsDamageOnStderr(t *testing.T) {
	dir := fixture(t, 20)
	flip(t, dir, 60) // inside seq 1
	stdout, stderr, code := tool3(t, "", "dump", "-format", "json", dir)
	if code != 1 {
		t.Fatalf("dump of a damaged queue exit %d, want 1\nstderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 19 {
		t.Fatalf("%d lines on stdout, want the 19 good records:\n%s", len(lines), stdout)
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", l, err)
		}
	}
	if !strings.Contains(stderr, "checksum mismatch") || !strings.Contains(stderr, "1 damaged record(s)") {
		t.Fatalf("stderr does not report the damage:\n%s", stderr)
	}
}

func TestStatAndVerifyJSON(t *testing.T) {
	dir := fixture(t, 10)
	first, err := readAt(t, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	stdout, _, code := tool3(t, "", "stat", "-format", "json", dir)
	after := time.Now()
	var st struct {
		Queue  string `json:"queue"`
		Depth  int64  `json:"depth"`
		Oldest struct {
			Seq  uint64    `json:"seq"`
			Time time.Time `json:"time"`
		} `json:"oldest_unacknowledged"`
		Lag      float64 `json:"lag_seconds"`
		Segments []struct {
			Name string `json:"name"`
		} `json:"segments"`
		BadFiles []any `json:"bad_files"`
		Free     int64 `json:"fs_free_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("stat -format json (%d, %v):\n%s", code, err, stdout)
	}
	if runtime.GOOS != "windows" && st.Free <= 0 {
		t.Errorf("stat -format json: fs_free_bytes %d, want the file system's free space", st.Free)
	}
	// The lag is the age of seq 0, measured between before and after.
	if st.Depth != 10 || st.Oldest.Seq != 0 || !st.Oldest.Time.Equal(first.Time) ||
		st.Lag < before.Sub(first.Time).Seconds() || st.Lag > after.Sub(first.Time).Seconds() ||
		len(st.Segments) != 1 || st.BadFiles == nil {
		t.Fatalf("stat -format json: %+v\n%s", st, stdout)
	}
	if out, _ := tool(t, "", "stat", dir); !strings.Contains(out, "lag        ") || !strings.Contains(out, "oldest unacknowledged record: seq 0") {
		t.Fatalf("stat shows no lag:\n%s", out)
	}

	flip(t, dir, 60)
	stdout, _, code = tool3(t, "", "verify", "-format", "json", dir)
	var v struct {
		OK       bool `json:"ok"`
		Problems []struct {
			File   string `json:"file"`
			Offset int64  `json:"offset"`
			Error  string `json:"error"`
			Damage bool   `json:"damage"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(stdout), &v); code != 1 || err != nil {
		t.Fatalf("verify -format json (%d, %v):\n%s", code, err, stdout)
	}
	if v.OK || len(v.Problems) != 1 || v.Problems[0].File != "00000000000000000000.log" || !v.Problems[0].Damage || !strings.Contains(v.Problems[0].Error, "checksum mismatch") {
		t.Fatalf("verify -format json: %+v", v)
	}
}

func readAt(t *testing.T, dir string, seq uint64) (diskqueue.Record, error) {
	t.Helper()
	q, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{})
	if err != nil {
		return diskqueue.Record{}, err
	}
	defer q.Close()
	return q.ReadAt(seq)
}

// TestErrorsSayPrefixesOnce: the layers' prefixes ("diskqueue: …") do not
// pile up in what the tool prints.
func TestErrorsSayPrefixesOnce(t *testing.T) {
	dir := fixture(t, 5)
	q, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tool3(t, "", "drain", dir)
	q.Close()
	want := fmt.Sprintf("spillq drain: %s is locked (directory is locked by another open queue): a service or another spillq command has the queue open; stop it first\n", dir)
	if code != 1 || stderr != want {
		t.Fatalf("drain of a locked queue (%d):\n%q\nwant\n%q", code, stderr, want)
	}
	flip(t, dir, 60)
	_, stderr, code = tool3(t, "", "get", dir, "1")
	if code != 1 || strings.Contains(stderr, "diskqueue:") || strings.Count(stderr, "spillq") != 1 || !strings.Contains(stderr, "checksum mismatch") {
		t.Fatalf("get of a damaged record (%d):\n%s", code, stderr)
	}
	_, stderr, code = tool3(t, "", "dump", dir)
	if code != 1 || strings.Count(stderr, "corrupt data") != 1 || strings.Contains(stderr, "diskqueue:") {
		t.Fatalf("dump of a damaged record (%d):\n%s", code, stderr)
	}
}

// TestAcknowledgeDamage: after a flipped byte, repair sets the damage aside
// and exits 0; verify stays red until the operator acknowledges it with
// repair -ack-bad, and goes red again on new damage; stat counts what is
// on disk.
func TestAcknowledgeDamage(t *testing.T) {
	dir := fixture(t, 20)
	flip(t, dir, 60) // seq 1
	out, code := tool(t, "", "repair", dir)
	if code != 0 || !strings.Contains(out, "copied to 00000000000000000000.log.49.bad") || !strings.Contains(out, "repair -ack-bad") {
		t.Fatalf("repair (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "verify", dir); code != 1 || !strings.Contains(out, "not acknowledged") {
		t.Fatalf("verify before the acknowledgement (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "stat", dir); !strings.Contains(out, "bad files  1 (0 acknowledged, 1 not)") || !strings.Contains(out, "00000000000000000000.log.49.bad") {
		t.Fatalf("stat does not count the .bad file:\n%s", out)
	}
	out, code = tool(t, "", "repair", "-ack-bad", dir)
	if code != 0 || !strings.Contains(out, "acknowledged 00000000000000000000.log.49.bad: now 00000000000000000000.log.49.acked.bad") {
		t.Fatalf("repair -ack-bad (%d):\n%s", code, out)
	}
	out, code = tool(t, "", "verify", dir)
	if code != 0 || !strings.Contains(out, "acknowledged 00000000000000000000.log offset 49") || !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("verify after the acknowledgement (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "stat", dir); !strings.Contains(out, "bad files  1 (1 acknowledged, 0 not)") {
		t.Fatalf("stat after the acknowledgement:\n%s", out)
	}
	// A reader meets the damage and copies it again: still acknowledged,
	// both files counted, and -ack-bad drops the identical copy.
	if out, code := tool(t, "", "drain", "-limit", "3", dir); code != 0 {
		t.Fatalf("drain (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "stat", dir); !strings.Contains(out, "bad files  2 (2 acknowledged, 0 not)") {
		t.Fatalf("stat with a second copy:\n%s", out)
	}
	if out, code := tool(t, "", "verify", dir); code != 0 {
		t.Fatalf("verify with a second copy (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "repair", "-ack-bad", dir); code != 0 || !strings.Contains(out, "removed 00000000000000000000.log.49.bad") {
		t.Fatalf("repair -ack-bad of a second copy (%d):\n%s", code, out)
	}
	// New damage, and damage acknowledged by -ack-bad only once set aside.
	flip(t, dir, 16+33*9+7) // seq 9
	if out, code := tool(t, "", "verify", dir); code != 1 || !strings.Contains(out, "PROBLEM 00000000000000000000.log offset 313") {
		t.Fatalf("verify of new damage (%d):\n%s", code, out)
	}
	out, code = tool(t, "", "repair", "-ack-bad", dir)
	if code != 0 || !strings.Contains(out, "copied to 00000000000000000000.log.313.bad") || strings.Contains(out, "acknowledged 00000000000000000000.log.313.bad") {
		t.Fatalf("repair -ack-bad acknowledged damage it had just found (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "verify", dir); code != 1 {
		t.Fatalf("verify after setting the new damage aside (%d):\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.log.313.bad"))
	if err != nil || len(b) != 33 {
		t.Fatalf("the .bad file holds %d bytes (%v), want the 33 of the damaged record", len(b), err)
	}
}

// TestStatCountsWhatIsOnDisk: the .bad files and segments stat lists are
// the directory's, even in a directory whose name is a glob pattern.
func TestStatCountsWhatIsOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs[1]")
	if out, code := tool(t, "a\nb\nc\n", "put", "-create", "-raw", dir); code != 0 {
		t.Fatalf("put (%d):\n%s", code, out)
	}
	flip(t, dir, 16+5)
	if out, code := tool(t, "", "repair", dir); code != 0 {
		t.Fatalf("repair (%d):\n%s", code, out)
	}
	os.WriteFile(filepath.Join(dir, "00000000000000000000.log.9.acked.bad"), []byte("old"), 0o644)
	out, code := tool(t, "", "stat", dir)
	if code != 0 || !strings.Contains(out, "bad files  2 (1 acknowledged, 1 not)") || !strings.Contains(out, "disk       ") ||
		!regexp.MustCompile(`in 1 segment\(s\)(; \d+ bytes free on its file system)?\n  00000000000000000000\.log`).MatchString(out) {
		t.Fatalf("stat of %s (%d):\n%s", dir, code, out)
	}
}

// TestStatNamedCursors: stat lists a log's named cursors with each one's
// read position and depth, in text and JSON.
func TestStatNamedCursors(t *testing.T) {
	dir := t.TempDir()
	l, err := diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fast, err := l.Cursor("fast", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cursor("slow", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := l.Put(ctx, []byte(fmt.Sprintf("job %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 7; i++ {
		rec, err := fast.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fast.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	out, code := tool(t, "", "stat", dir)
	if code != 0 || !strings.Contains(out, "fast  read seq 7  depth 3") || !strings.Contains(out, "slow  read seq 0  depth 10") || !strings.Contains(out, "no cursor of its own") ||
		!strings.Contains(out, "depth      10 records not acknowledged, in cursor slow, the deepest") ||
		!strings.Contains(out, "in cursor slow (its oldest record not acknowledged: seq 0, stored ") {
		t.Fatalf("stat (%d):\n%s", code, out)
	}
	if h := statJSON(t, dir); h.Depth != 10 || h.Deepest != "slow" || h.Slowest != "slow" || h.Oldest == nil || h.Oldest.Seq != 0 || h.Retained != 10 {
		t.Fatalf("stat -format json header: %+v", h)
	}
	stdout, _, code := tool3(t, "", "stat", "-format", "json", dir)
	var st struct {
		Cursors []struct {
			Name    string `json:"name"`
			ReadSeq uint64 `json:"read_seq"`
			Depth   int64  `json:"depth"`
			Oldest  struct {
				Seq uint64 `json:"seq"`
			} `json:"oldest_unacknowledged"`
		} `json:"cursors"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("stat -format json (%d, %v):\n%s", code, err, stdout)
	}
	if len(st.Cursors) != 2 || st.Cursors[0].Name != "fast" || st.Cursors[0].Depth != 3 || st.Cursors[0].Oldest.Seq != 7 ||
		st.Cursors[1].Name != "slow" || st.Cursors[1].ReadSeq != 0 || st.Cursors[1].Depth != 10 {
		t.Fatalf("stat -format json cursors: %+v", st.Cursors)
	}
}

// TestCursorCommand: cursor create, reset and delete manage a log's named
// cursors without giving the log a cursor of its own.
func TestCursorCommand(t *testing.T) {
	dir := t.TempDir()
	l, err := diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cursor("a", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := l.Put(context.Background(), []byte(fmt.Sprintf("job %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cursor", "create", "b", "-from", "4", dir}, 0, "cursor b at seq 4, 6 records to read"},
		{[]string{"cursor", "create", "b", dir}, 1, `cursor "b" exists`},
		{[]string{"cursor", "reset", "b", "-from", "oldest", dir}, 0, "cursor b at seq 0, 10 records to read"},
		{[]string{"cursor", "create", "c", dir}, 0, "cursor c at seq 10, 0 records to read"},
		{[]string{"cursor", "delete", "c", dir}, 0, "deleted cursor c"},
		{[]string{"cursor", "delete", "c", dir}, 1, `cursor "c" does not exist (`},
		{[]string{"cursor", "create", "bad/name", dir}, 1, "bad cursor name"},
		{[]string{"cursor", "move", "b", dir}, 2, "want create, delete or reset"},
	} {
		out, code := tool(t, "", c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
	l, err = diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Cursors(); strings.Join(got, ",") != "a,b" {
		t.Errorf("cursors after the commands: %q, want a and b (and no cursor of the log's own)", got)
	}
}

// topicFixture makes a topic of 10 messages read by two channels: billing
// finished 7; analytics deferred the first for an hour and held the
// second in flight when the topic closed (its Close moves that one to the
// timer store too), so its cursor is at seq 2 with 2 messages deferred.
func topicFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	billing, err := tp.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	analytics, err := tp.Channel("analytics", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if err := tp.Put(ctx, []byte(fmt.Sprintf("job %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 7; i++ {
		m, err := billing.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := analytics.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Requeue(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := analytics.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStatTopic: stat shows each channel of a topic with its depth, in
// flight, lag and deferred messages, in text and JSON.
func TestStatTopic(t *testing.T) {
	dir := topicFixture(t)
	out, code := tool(t, "", "stat", dir)
	for _, want := range []string{
		"topic      " + dir,
		"records    channel messages",
		"channels   2\n",
		"  analytics  read seq 2  depth 8  lag ",
		"  billing  read seq 7  depth 3  lag ",
		"  in flight 0  deferred 2\n",
		"  in flight 0  deferred 0\n",
		"deferred: messages in its timer store",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("stat of a topic (%d) lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "cursors ") {
		t.Fatalf("stat of a topic lists its channels as cursors too:\n%s", out)
	}
	before := time.Now()
	stdout, _, code := tool3(t, "", "stat", "-format", "json", dir)
	var st struct {
		Topic    bool  `json:"topic"`
		Cursors  []any `json:"cursors"`
		Channels []struct {
			Name     string `json:"name"`
			ReadSeq  uint64 `json:"read_seq"`
			Depth    int64  `json:"depth"`
			InFlight int64  `json:"in_flight"`
			Deferred int64  `json:"deferred"`
			Oldest   struct {
				Seq  uint64    `json:"seq"`
				Time time.Time `json:"time"`
			} `json:"oldest_unacknowledged"`
			Lag float64 `json:"lag_seconds"`
		} `json:"channels"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("stat -format json (%d, %v):\n%s", code, err, stdout)
	}
	if !st.Topic || st.Cursors != nil || len(st.Channels) != 2 {
		t.Fatalf("stat -format json of a topic: %+v\n%s", st, stdout)
	}
	a, b := st.Channels[0], st.Channels[1]
	if a.Name != "analytics" || a.ReadSeq != 2 || a.Depth != 8 || a.InFlight != 0 || a.Deferred != 2 || a.Oldest.Seq != 2 ||
		a.Lag < before.Sub(a.Oldest.Time).Seconds() || a.Lag <= 0 {
		t.Errorf("analytics: %+v", a)
	}
	if b.Name != "billing" || b.ReadSeq != 7 || b.Depth != 3 || b.Deferred != 0 || b.Oldest.Seq != 7 {
		t.Errorf("billing: %+v", b)
	}
	// A queue's directory is no topic, and says so.
	stdout, _, _ = tool3(t, "", "stat", "-format", "json", fixture(t, 1))
	if strings.Contains(stdout, `"channels"`) || !strings.Contains(stdout, `"topic": false`) {
		t.Fatalf("stat -format json of a queue:\n%s", stdout)
	}
}

// TestChannelCommand: channel create, reset and delete manage a topic's
// channels; delete takes the timer store too, reset keeps it; cursor and
// channel each refuse the other's kind of directory.
func TestChannelCommand(t *testing.T) {
	dir := topicFixture(t)
	queue := fixture(t, 3)
	timers := func(name string) string { return filepath.Join(dir, spillq.ChannelsDir, name) }
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"channel", "create", "audit", "-from", "oldest", dir}, 0, "channel audit at seq 0, 10 records to read"},
		{[]string{"channel", "create", "audit", dir}, 1, `channel "audit" exists`},
		{[]string{"channel", "reset", "analytics", "-from", "9", dir}, 0, "channel analytics at seq 9, 1 records to read\nits timer store (channels/analytics) is kept"},
		{[]string{"channel", "delete", "billing", dir}, 0, "deleted channel billing"},
		{[]string{"channel", "delete", "billing", dir}, 1, `channel "billing" does not exist (`},
		{[]string{"channel", "create", "bad/name", dir}, 1, "bad cursor name"},
		{[]string{"channel", "move", "audit", dir}, 2, "want create, delete or reset"},
		{[]string{"channel", "create", "x", queue}, 1, "is not a topic's directory"},
		{[]string{"cursor", "create", "x", dir}, 1, "is a topic's directory"},
	} {
		out, code := tool(t, "", c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
	if _, err := os.Stat(timers("billing")); !os.IsNotExist(err) {
		t.Errorf("billing's timer store after channel delete: %v", err)
	}
	if _, err := os.Stat(timers("analytics")); err != nil {
		t.Errorf("analytics's timer store after channel reset: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cursor")); !os.IsNotExist(err) {
		t.Errorf("the commands gave the topic a cursor of its own: %v", err)
	}
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if got := strings.Join(tp.Channels(), ","); got != "analytics,audit" {
		t.Errorf("channels after the commands: %q, want analytics and audit", got)
	}
	// The channel the topic is running refuses, naming the lock.
	if out, code := tool(t, "", "channel", "create", "y", dir); code != 1 || !strings.Contains(out, "stop it first") {
		t.Errorf("channel create on an open topic (%d): %s", code, out)
	}
	// analytics reads from seq 9 now, and gets what it held in flight at
	// its last Close too, kept in its timer store through the reset (in
	// no set order: the timer store is read in the background).
	analytics, err := tp.Channel("analytics", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for range 2 {
		m, err := analytics.Receive(ctx)
		if err != nil {
			t.Fatalf("analytics after the reset, having got %q: %v", got, err)
		}
		got = append(got, string(m.Body))
		m.Finish()
	}
	if slices.Sort(got); strings.Join(got, ",") != "job 1,job 9" {
		t.Errorf("analytics after the reset got %q, want the message kept in its timer store, then job 9", got)
	}
}

// TestTopicNotOpenedAsQueue: the commands that open a directory as a
// queue refuse a topic's, which a cursor of the log's own would make one
// spillq.OpenTopic refuses; repair opens its log alone.
func TestTopicNotOpenedAsQueue(t *testing.T) {
	dir := topicFixture(t)
	src := t.TempDir()
	dq := godiskqueue.New("orders", src, 256, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
	if err := dq.Put([]byte("order 0")); err != nil {
		t.Fatal(err)
	}
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"put", "-channel", dir}, {"drain", dir}, {"import-nsqd", "-name", "orders", "-from", src, "-source", "raw", dir}} {
		out, code := tool(t, "x\n", args...)
		if code != 1 || !strings.Contains(out, "is a topic's directory") {
			t.Errorf("%v: exit %d, output %q; want exit 1 and a refusal", args, code, out)
		}
	}
	if out, code := tool(t, "", "repair", dir); code != 0 || !strings.Contains(out, "repaired: 10 records") {
		t.Fatalf("repair of a topic (%d):\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "cursor")); !os.IsNotExist(err) {
		t.Fatalf("the commands gave the topic a cursor of its own: %v", err)
	}
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatalf("OpenTopic after the commands: %v", err)
	}
	tp.Close()
}

// TestKeyCommand: key lists the records of one key the log holds, oldest
// first, with the newest named last; a key the log does not hold exits 1.
func TestKeyCommand(t *testing.T) {
	dir := t.TempDir()
	q, err := spillq.Open(dir, spillq.Options{Keys: channel.KeyReplace, Disk: diskqueue.Options{RetainBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, k := range []string{"a", "b", "a", "a"} {
		if err := q.PutWith(ctx, []byte(fmt.Sprintf("%s v%d", k, i)), channel.PutOptions{Key: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	// v0 and v2 are superseded: the channel acknowledges them unseen as it
	// takes them, and hands out b v1, left in flight, and v3, finished.
	// Close stores b v1 again (attempts=0: the delivery Close cut short is
	// not spent) and acknowledges its first record. All stay in the log (RetainBytes).
	for range 2 {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Body) == "a v3" {
			m.Finish()
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := tool3(t, "", "key", dir, "a")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], `"a v0"`) || !strings.Contains(lines[2], `key="a"`) || !strings.Contains(lines[2], `"a v3"`) {
		t.Errorf("key a: exit %d\n%s", code, stdout)
	}
	for _, l := range lines {
		if !strings.Contains(l, "\tacknowledged\t") {
			t.Errorf("key a: a record not shown acknowledged: %q", l)
		}
	}
	if !strings.Contains(stderr, `key "a": 3 record(s) in the log (3 acknowledged, 0 pending), the newest at seq 3`) {
		t.Errorf("key a: stderr %q", stderr)
	}
	stdout, stderr, code = tool3(t, "", "key", dir, "b")
	if code != 0 || !strings.Contains(stdout, "attempts=0 key=\"b\"\tpending\t") || !strings.Contains(stderr, "2 record(s) in the log (1 acknowledged, 1 pending), the newest at seq 4") {
		t.Errorf("key b: exit %d\n%s\n%s", code, stdout, stderr)
	}
	out, code := tool(t, "", "key", dir, "a", "-format", "json")
	if code != 0 || !strings.Contains(out, `"key":"a"`) || !strings.Contains(out, `"acknowledged":true`) {
		t.Errorf("key -format json: exit %d\n%s", code, out)
	}
	if out, code := tool(t, "", "key", dir, "zzz"); code != 1 || !strings.Contains(out, "no record") {
		t.Errorf("key zzz: exit %d, %q", code, out)
	}
}

// TestKeyCommandTimers: a deferred message waits in the timer store, which
// spillq key lists when given it, as docs/keys.md says.
func TestKeyCommandTimers(t *testing.T) {
	dir := t.TempDir()
	q, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PutWith(context.Background(), []byte("later"), channel.PutOptions{Key: []byte("d"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := tool3(t, "", "key", filepath.Join(dir, spillq.TimersDir), "d")
	if code != 0 || !strings.Contains(stdout, `"later"`) || !strings.Contains(stderr, "1 record(s) in the log (0 acknowledged, 1 pending)") {
		t.Errorf("key d in the timer store: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestKeyCommandTopic: spillq key reads a topic's log too, from its first
// record still on disk.
func TestKeyCommandTopic(t *testing.T) {
	dir := t.TempDir()
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{Keys: channel.KeyReplace, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tp.Channel("a", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 100 {
		if err := tp.PutWith(ctx, []byte(fmt.Sprintf("k v%d", i)), channel.PutOptions{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ch.Receive(ctx) // v99: the others are superseded
	if err != nil {
		t.Fatal(err)
	}
	m.Finish()
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := tool3(t, "", "key", dir, "k")
	if code != 0 || !strings.Contains(stdout, `"k v99"`) || !strings.Contains(stderr, "the newest at seq 99") {
		t.Errorf("key k on a topic: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestVerifyCompacted: verify says how many seqs compaction removed, and
// does not take them for damage.
func TestVerifyCompacted(t *testing.T) {
	dir := t.TempDir()
	q, err := spillq.Open(dir, spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 100 {
		if err := q.PutWith(ctx, []byte(fmt.Sprintf("v%d", i)), channel.PutOptions{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
	}
	var removed int64
	for removed == 0 {
		st, err := q.Compact(ctx)
		if err != nil {
			t.Fatal(err)
		}
		removed = st.Removed
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	out, code := tool(t, "", "verify", dir)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d seq(s) name records compaction removed", removed)) || !strings.Contains(out, "ok") {
		t.Errorf("verify: exit %d\n%s", code, out)
	}
	out, code = tool(t, "", "verify", dir, "-format", "json")
	if code != 0 || !strings.Contains(out, fmt.Sprintf(`"records_compacted": %d`, removed)) {
		t.Errorf("verify -format json: exit %d\n%s", code, out)
	}
}

// TestBodyAtTheDefaultLimit: a queue of spillq.Open with the default
// options takes a 1 MiB body, whose record (in its envelope) is larger
// than 1 MiB. The tool opens queues with diskqueue's defaults, and took
// that record for damage: verify reported it, get refused it and drain
// acknowledged it unprinted, so the service never received it.
// import-nsqd of a 1 MiB nsqd message (nsqd's default --max-msg-size)
// stopped halfway; one over the limit is refused before anything is
// imported.
func TestBodyAtTheDefaultLimit(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	q, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("b"), diskqueue.DefaultMaxRecordBytes)
	for _, b := range [][]byte{[]byte("small before"), big, []byte("small after")} {
		if err := q.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if out, code := tool(t, "", "verify", dir); code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "\nok") {
		t.Fatalf("verify (%d):\n%.400s", code, out)
	}
	if out, code := tool(t, "", "get", dir, "1"); code != 0 || !strings.Contains(out, string(big[:1000])) {
		t.Fatalf("get 1 (%d):\n%.400s", code, out)
	}
	out, code := tool(t, "", "drain", dir)
	if code != 0 || strings.Count(out, "b") < len(big) || !strings.Contains(out, "small after") {
		t.Fatalf("drain (%d):\n%.400s", code, out)
	}

	src := t.TempDir()
	dq := godiskqueue.New("orders", src, 8<<20, 0, 4<<20, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
	put := func(body []byte) {
		var b bytes.Buffer
		var id nsq.MessageID
		copy(id[:], fmt.Sprintf("%016x", len(body)))
		if _, err := nsq.NewMessage(id, body).WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if err := dq.Put(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	put([]byte("first"))
	put(big)
	put([]byte("last"))
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "q")
	if out, code := tool(t, "", "import-nsqd", "-name", "orders", "-from", src, "-create", "-channel", dst); code != 0 || !strings.Contains(out, "imported 3 messages") {
		t.Fatalf("import-nsqd of a 1 MiB message (%d):\n%.400s", code, out)
	}
	q, err = spillq.Open(dst, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]byte{[]byte("first"), big, []byte("last")} {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := q.Receive(rctx)
		cancel()
		if err != nil || !bytes.Equal(m.Body, want) {
			t.Fatalf("imported message: %.20q, %v; want %.20q", m.Body, err, want)
		}
		m.Finish()
	}
	q.Close()

	src = t.TempDir()
	dq = godiskqueue.New("orders", src, 8<<20, 0, 4<<20, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
	put([]byte("first"))
	put(append(big, 'x'))
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	dst = filepath.Join(t.TempDir(), "q")
	if out, code := tool(t, "", "import-nsqd", "-name", "orders", "-from", src, "-create", "-channel", dst); code != 1 || !strings.Contains(out, "nothing imported") {
		t.Fatalf("import-nsqd of a message over the limit (%d):\n%.400s", code, out)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a refused import left %s behind: %v", dst, err)
	}
}

// TestDrainIntoAClosedPipe: a reader that stops early (spillq drain | head
// -1) made the next write kill the tool with SIGPIPE. drain now stops with
// the write's error, and the record it was writing stays unacknowledged.
func TestDrainIntoAClosedPipe(t *testing.T) {
	dir := t.TempDir()
	var lines strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&lines, "record %d\n", i)
	}
	if out, code := tool(t, lines.String(), "put", "-create", "-raw", dir); code != 0 {
		t.Fatalf("put (%d):\n%s", code, out)
	}
	cmd := exec.Command(bin, "drain", dir)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	first := make([]byte, 10)
	if _, err := r.Read(first); err != nil {
		t.Fatal(err)
	}
	r.Close() // as head does once it has its line
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "broken pipe") {
		t.Fatalf("drain into a closed pipe: %v (%v), want exit status 1 saying broken pipe\n%s", err, cmd.ProcessState, stderr.String())
	}
	out, _ := tool(t, "", "stat", dir)
	if !strings.Contains(out, "depth") || strings.Contains(out, "depth      0 ") {
		t.Fatalf("stat after the drain stopped:\n%s", out)
	}
}
