// Package crashtest is the harness behind spillq's crash tests: it runs a
// test's own binary as a child, SIGKILLs it, and returns what the child
// acknowledged before it died.
//
// The child reports events (an acknowledged put, a consumed message) with
// Report, one line per write(2) on its standard output; the parent reads
// them through a pipe. A SIGKILL ends the child between two write calls,
// never inside one, and the pipe keeps every line written, so the events
// the parent gets are exactly what the child acknowledged: the ground
// truth the test checks the reopened queue against.
package crashtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// ChildEnv is the variable that marks a process as a crash test's child;
// its value is the directory the child works in.
const ChildEnv = "SPILLQ_CRASHTEST_DIR"

// Dir returns the directory a child works in, and false when the process is
// not a child (the child test should then skip).
func Dir() (string, bool) {
	d := os.Getenv(ChildEnv)
	return d, d != ""
}

// KillSelf ends the process at once, as a crash would: SIGKILL on Unix,
// TerminateProcess on Windows. No deferred call runs and no buffer is
// flushed. It does not return.
func KillSelf() {
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		// A child that cannot kill itself would go on past its crash
		// point and make the parent's checks meaningless.
		panic("crashtest: kill self: " + err.Error())
	}
	select {} // the signal is on its way
}

var reportMu sync.Mutex

// Report writes one event line for the parent: kind, then fields. Safe for
// concurrent use.
func Report(kind string, fields ...any) {
	var b strings.Builder
	b.WriteString(kind)
	for _, f := range fields {
		fmt.Fprintf(&b, " %v", f)
	}
	b.WriteByte('\n')
	reportMu.Lock()
	os.Stdout.WriteString(b.String()) // one write(2): a kill never splits it
	reportMu.Unlock()
}

// Run describes one child run.
type Run struct {
	Test string   // the child test's name, run from this test binary
	Dir  string   // passed to the child as ChildEnv
	Env  []string // more environment for the child
	// KillAfter is how many events of KillKind the parent waits for
	// before it sends SIGKILL. Zero means the child is expected to kill
	// itself (a crash point); the parent then only reads.
	KillAfter int
	KillKind  string
	// OnEvent, if set, is called in the parent for every event while the
	// child runs, with how many events of that kind there have been.
	OnEvent func(kind, id string, n int)
}

// Result is what a run returned.
type Result struct {
	Events     map[string][]string // kind -> the first field of each event, in order
	KilledSelf bool                // the child died of a signal the parent did not send
}

// Has reports whether an event of kind with first field id was reported.
func (r Result) Has(kind, id string) bool {
	for _, e := range r.Events[kind] {
		if e == id {
			return true
		}
	}
	return false
}

// Set returns the events of kind as a set.
func (r Result) Set(kind string) map[string]bool {
	s := make(map[string]bool, len(r.Events[kind]))
	for _, e := range r.Events[kind] {
		s[e] = true
	}
	return s
}

// Start runs the child to its death and returns its events. It fails the
// test if the child exits on its own, or reports something that is not an
// event.
func Start(t testing.TB, r Run) Result {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+r.Test+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), ChildEnv+"="+r.Dir), r.Env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := Result{Events: map[string][]string{}}
	killed := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=== RUN") || line == "" {
			continue
		}
		fields := strings.Fields(line)
		kind, id := fields[0], ""
		if len(fields) > 1 {
			id = fields[1]
		}
		if strings.HasSuffix(kind, "-error") {
			cmd.Process.Kill()
			t.Fatalf("child: %s", line)
		}
		res.Events[kind] = append(res.Events[kind], id)
		if r.OnEvent != nil {
			r.OnEvent(kind, id, len(res.Events[kind]))
		}
		if r.KillAfter > 0 && !killed && kind == r.KillKind && len(res.Events[kind]) >= r.KillAfter {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != -1 {
		t.Fatalf("child %s: want death by signal, got %v", r.Test, err)
	}
	res.KilledSelf = !killed
	return res
}

// AsMain lets a command's tests run the command as a child process of
// their own test binary, with no build of their own: called first in
// TestMain, it runs main and exits when env is "1" (a child), and
// otherwise returns the test binary's path and sets env for every child
// the tests start. Under -race a child would sleep a second before it
// exits (the race runtime's atexit_sleep_ms), so GORACE turns that off;
// GORACE options set by hand still win.
func AsMain(env string, main func()) string {
	if os.Getenv(env) == "1" {
		main()
		os.Exit(0)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(env, "1")
	os.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=0 "+os.Getenv("GORACE")))
	return exe
}
