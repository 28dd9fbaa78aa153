package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spillq-tool")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "spillq")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// tool runs the binary and returns its stdout+stderr and exit status.
func tool(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
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
	if out, code = tool(t, "x\n", "put", dir); code != 1 || !strings.Contains(out, "stop the service") {
		t.Fatalf("put on a locked queue (%d):\n%s", code, out)
	}
}

func TestDumpSince(t *testing.T) {
	dir := t.TempDir()
	q, _ := diskqueue.Open(dir, diskqueue.Options{})
	q.Put(context.Background(), []byte("old"))
	q.Sync(context.Background())
	// "old" was stamped before mid and "new" is stamped after it.
	mid := time.Now()
	q.Put(context.Background(), []byte("new"))
	q.Close()
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

func TestPutDrainAndTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if out, code := tool(t, "one\ntwo\nthree\n", "put", dir); code != 0 || !strings.Contains(out, "put 3 records") {
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

// TestChannelRecords: -channel puts messages a spillq service consumes, and
// dumps what such a service stored.
func TestChannelRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if out, code := tool(t, "job A\njob B\n", "put", "-channel", dir); code != 0 {
		t.Fatalf("put -channel (%d):\n%s", code, out)
	}
	if out, _ := tool(t, "", "dump", "-channel", dir); !strings.Contains(out, `attempts=0`) || !strings.Contains(out, `"job B"`) {
		t.Fatalf("dump -channel:\n%s", out)
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
	out, code := tool(t, "", "import-nsqd", "-name", "orders", "-from", src, dst)
	if code != 0 || !strings.Contains(out, "imported 33 messages") {
		t.Fatalf("import-nsqd (%d):\n%s", code, out)
	}
	out, _ = tool(t, "", "dump", dst)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 33 || !strings.Contains(lines[0], `"order 7"`) || !strings.Contains(lines[32], `"order 39"`) {
		t.Fatalf("imported records:\n%s", out)
	}
	if _, code := tool(t, "", "import-nsqd", "-name", "missing", "-from", src, dst); code != 1 {
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
