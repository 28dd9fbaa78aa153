// Command bench runs spillq's side-by-side benchmark matrix and writes the
// report docs/performance.md and the README's performance table draw on
// (bench/results.md): a results table (medians of several runs, with
// their spread), the raw runs, and SVG charts.
//
// It is a module of its own, so that the plotting library and its
// dependencies stay out of spillq's go.mod; run it from the repository
// root with -C:
//
//	go run -C cmd/bench .                     # the full matrix, 6 runs each: about 20 minutes
//	go run -C cmd/bench . -count 3 -quick     # a smaller, faster pass
//	go run -C cmd/bench . -from ../../b.txt   # redraw from runs already made
//
// The benchmarks run in the spillq repository that holds the working
// directory (found by walking up to its go.mod). Output goes to -out
// (default: bench/ at the repository root): results.md, raw.txt,
// throughput.svg and lookup.svg.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// suites are the benchmark runs that make up the matrix: the directory
// (relative to the repository root) and package, the pattern, and extra
// flags; a suite with flags of its own keeps them under -quick.
var suites = []struct {
	dir, pkg, pattern string
	flags             []string
}{
	{"", "./diskqueue", "Put/|^BenchmarkDrain$|PutGet|SyncEveryRecord", nil},
	{"", "./diskqueue", "Lookup|IndexCost", nil},
	{"", "./diskqueue", "^BenchmarkOpen$", []string{"-benchtime", "100x"}},
	{"", "./diskqueue", "Cursors", nil},
	{"", "./diskqueue", "DrainRSS", []string{"-benchtime", "1x"}}, // peak RSS, in a child process
	// The go-diskqueue drop-in against go-diskqueue: each run is one
	// round of both sides in turn, so the medians are of rounds.
	{"", "./diskqueue/godq", "CompatRatio", []string{"-benchtime", "1x"}},
	{"", ".", "MemoryPath|SpillPath|SpillDrain", nil},
	{"", ".", "TopicPut", []string{"-benchtime", "200000x"}},
	{"", ".", "SpilledRSS", []string{"-benchtime", "1x"}},
	{"", "./nsqbridge", "Publish", nil}, // builds and starts a real nsqd
	// bigqueue, whose module only cmd/bench requires. A fixed count: at
	// -benchtime 1s bigqueue enqueues more than a GiB, into memory this
	// VM's host backs only as it is first touched.
	{"cmd/bench", "./peers", "^Benchmark(Put|Drain|PutGet)$", []string{"-benchtime", "1000000x"}},
	{"cmd/bench", "./peers", "ChannelPut", []string{"-benchtime", "1000000x"}},
	// spillq's Worker against an embedded NATS JetStream (nats-server in
	// the process): jobs per second under the same durability. Fixed
	// counts: JetStream fsyncing every job and ack (durability=disk) takes
	// about a millisecond a job, its publishing (untimed) as long again.
	{"cmd/bench", "./peers", "^BenchmarkJobs/^durability=kernel$", []string{"-benchtime", "20000x"}},
	{"cmd/bench", "./peers", "^BenchmarkJobsDrain$/^durability=disk$", []string{"-benchtime", "5000x"}},
}

func main() {
	count := flag.Int("count", 6, "runs of each benchmark; figures are medians")
	quick := flag.Bool("quick", false, "shorter runs (-benchtime 200ms): noisier figures")
	out := flag.String("out", "", "directory for the report (default: bench/ at the repository root)")
	from := flag.String("from", "", "read benchmark output from this file instead of running")
	flag.Parse()
	if err := run(*count, *quick, *out, *from, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// rootModule is the module whose benchmarks bench runs.
const rootModule = "github.com/spillq/spillq"

// findRoot returns the directory of the spillq module that holds dir: the
// nearest directory at or above it whose go.mod declares rootModule.
func findRoot(dir string) (string, error) {
	for d := dir; ; {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && declares(b, rootModule) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no %s module at or above %s: run bench inside the spillq repository", rootModule, dir)
		}
		d = parent
	}
}

// declares reports whether a go.mod's module line names module.
func declares(gomod []byte, module string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == module
		}
	}
	return false
}

func run(count int, quick bool, out, from string, progress io.Writer) error {
	if count < 1 {
		return errors.New("-count must be at least 1")
	}
	// The benchmarks run at the repository root, and the report goes there
	// by default: both whatever the directory bench was started in.
	var root string
	if from == "" || out == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if root, err = findRoot(wd); err != nil {
			return err
		}
	}
	if out == "" {
		out = filepath.Join(root, "bench")
	}
	var raw []byte
	if from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		raw = b
	} else {
		for _, s := range suites {
			args := []string{"test", s.pkg, "-run", "^$", "-bench", s.pattern, "-count", fmt.Sprint(count)}
			if quick && s.flags == nil {
				args = append(args, "-benchtime", "200ms")
			}
			args = append(args, s.flags...)
			dir := filepath.Join(root, s.dir)
			fmt.Fprintf(progress, "(in %s) go %s\n", dir, strings.Join(args, " "))
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			cmd.Stderr = progress
			b, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
			}
			raw = append(raw, b...)
		}
	}
	results, err := parse(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return errors.New("no benchmark results")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "raw.txt"), raw, 0o644); err != nil {
		return err
	}
	if err := writeTable(filepath.Join(out, "results.md"), results, machine(raw)); err != nil {
		return err
	}
	if err := throughputChart(filepath.Join(out, "throughput.svg"), results); err != nil {
		return err
	}
	if err := lookupChart(filepath.Join(out, "lookup.svg"), results); err != nil {
		return err
	}
	fmt.Fprintf(progress, "wrote %s/{results.md,raw.txt,throughput.svg,lookup.svg}\n", out)
	return nil
}

// machine describes where the figures come from: go test's own header
// lines, plus core count and Go version.
func machine(raw []byte) string {
	var parts []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		for _, key := range []string{"goos:", "goarch:", "cpu:"} {
			if strings.HasPrefix(line, key) && !seen[key] {
				seen[key] = true
				parts = append(parts, strings.TrimSpace(line))
			}
		}
	}
	parts = append(parts, fmt.Sprintf("cores: %d", runtime.NumCPU()), "go: "+runtime.Version(), "date: "+time.Now().UTC().Format("2006-01-02"))
	return strings.Join(parts, ", ")
}
