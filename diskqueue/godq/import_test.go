package godq

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"
)

// These tests leave a backlog with go-diskqueue itself, then open the same
// name and path with NewCompat.

func backlogRecord(i int) string { return fmt.Sprintf("backlog-record-%03d", i) }

// writeBacklog has go-diskqueue put n records in small files, read the
// first read of them, and close, as nsqd would leave a queue.
func writeBacklog(t *testing.T, dir string, n, read int) {
	t.Helper()
	dq := godiskqueue.New("q", dir, 256, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
	for i := 0; i < n; i++ {
		if err := dq.Put([]byte(backlogRecord(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < read; i++ {
		if got := string(<-dq.ReadChan()); got != backlogRecord(i) {
			t.Fatalf("go-diskqueue read %q, want %q", got, backlogRecord(i))
		}
	}
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "q.diskqueue.*.dat")); len(files) < 3 {
		t.Fatalf("go-diskqueue left %d data files; the test wants several", len(files))
	}
}

// logCollector keeps what a queue logs.
type logCollector struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCollector) logf(lvl godiskqueue.LogLevel, f string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, lvl.String()+": "+fmt.Sprintf(f, args...))
}

func (l *logCollector) find(s string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

func openCompat(dir string, l *logCollector) godiskqueue.Interface {
	return NewCompat("q", dir, 256, 0, 1<<10, 2500, time.Second, l.logf)
}

// drain reads want from dq in order, then checks that nothing is left.
func drain(t *testing.T, dq godiskqueue.Interface, want []string) {
	t.Helper()
	if d := dq.Depth(); d != int64(len(want)) {
		t.Fatalf("Depth %d, want %d", d, len(want))
	}
	for i, w := range want {
		select {
		case got := <-dq.ReadChan():
			if string(got) != w {
				t.Fatalf("record %d: got %q, want %q", i, got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("record %d (%q) never came", i, w)
		}
	}
	if d := dq.Depth(); d != 0 {
		t.Fatalf("Depth %d after the backlog, want 0: records were put twice", d)
	}
}

func records(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, backlogRecord(i))
	}
	return out
}

// checkRetired fails if any go-diskqueue file (other than kept, set aside
// as damaged) or the import marker is left in dir.
func checkRetired(t *testing.T, dir string, kept ...string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(dir, "q.diskqueue.*"))
	var unexpected []string
	for _, f := range left {
		if !contains(kept, filepath.Base(f)) {
			unexpected = append(unexpected, filepath.Base(f))
		}
	}
	if len(unexpected) > 0 {
		t.Fatalf("files left after the import: %v", unexpected)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestImportBacklog(t *testing.T) {
	dir := t.TempDir()
	writeBacklog(t, dir, 60, 13)
	var l logCollector
	dq := openCompat(dir, &l)
	if line := l.find("imported a go-diskqueue backlog of 47 records (its metadata said 47)"); line == "" || !strings.HasPrefix(line, "INFO") {
		t.Fatalf("the import was not logged at INFO as 47 records: %q", l.lines)
	}
	checkRetired(t, dir)
	if err := dq.Put([]byte("after")); err != nil {
		t.Fatal(err)
	}
	drain(t, dq, append(records(13, 60), "after"))
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}

	// Once imported, never again.
	var again logCollector
	dq = openCompat(dir, &again)
	defer dq.Close()
	if line := again.find("import"); line != "" {
		t.Fatalf("a second open imported again: %q", line)
	}
	drain(t, dq, nil)
}

// TestImportDamagedFile: a go-diskqueue file whose records stop making
// sense is imported up to the damage and kept as .bad, as go-diskqueue
// would; the files after it are imported; a warning says so.
func TestImportDamagedFile(t *testing.T) {
	dir := t.TempDir()
	writeBacklog(t, dir, 60, 0)
	// Scribble over the length of the second record of the second file:
	// that record and the rest of the file are lost, nothing else.
	path := filepath.Join(dir, "q.diskqueue.000001.dat")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var inFile []string
	for off := 0; off < len(b); {
		n := int(binary.BigEndian.Uint32(b[off:]))
		inFile = append(inFile, string(b[off+4:off+4+n]))
		off += 4 + n
	}
	if len(inFile) < 3 {
		t.Fatalf("file 1 holds %d records; the test wants a few", len(inFile))
	}
	second := 4 + len(inFile[0])
	binary.BigEndian.PutUint32(b[second:], 0x7fffffff)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	lost := inFile[1:]
	var want []string
	for _, r := range records(0, 60) {
		if !contains(lost, r) {
			want = append(want, r)
		}
	}

	var l logCollector
	dq := openCompat(dir, &l)
	defer dq.Close()
	if line := l.find("is damaged"); !strings.HasPrefix(line, "WARN") {
		t.Fatalf("no warning about the damaged file: %q", l.lines)
	}
	checkRetired(t, dir, "q.diskqueue.000001.dat.bad")
	if _, err := os.Stat(path + ".bad"); err != nil {
		t.Fatalf("the damaged file was not kept: %v", err)
	}
	drain(t, dq, want)
}
