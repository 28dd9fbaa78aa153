// Command bench runs spillq's side-by-side benchmark matrix and writes the
// report the README shows: a results table (medians of several runs, with
// their spread), the raw runs, and SVG charts.
//
//	go run ./cmd/bench                  # the full matrix, 6 runs each: about 15 minutes
//	go run ./cmd/bench -count 3 -quick  # a smaller, faster pass
//	go run ./cmd/bench -from bench.txt  # redraw from runs already made
//
// Output goes to -out (default bench/): results.md, raw.txt,
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

// suites are the benchmark runs that make up the matrix: package, pattern
// and extra flags.
var suites = []struct {
	pkg, pattern string
	flags        []string
}{
	{"./diskqueue", "Put/|Drain|PutGet|SyncEveryRecord", nil},
	{"./diskqueue", "Lookup|IndexCost", nil},
	{"./diskqueue", "Open", []string{"-benchtime", "100x"}},
	{".", "MemoryPath|SpillPath", nil},
	{"./nsqbridge", "Publish", nil}, // builds and starts a real nsqd
}

func main() {
	count := flag.Int("count", 6, "runs of each benchmark; figures are medians")
	quick := flag.Bool("quick", false, "shorter runs (-benchtime 200ms): noisier figures")
	out := flag.String("out", "bench", "directory for the report")
	from := flag.String("from", "", "read benchmark output from this file instead of running")
	flag.Parse()
	if err := run(*count, *quick, *out, *from, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(count int, quick bool, out, from string, progress io.Writer) error {
	if count < 1 {
		return errors.New("-count must be at least 1")
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
			fmt.Fprintf(progress, "go %s\n", strings.Join(args, " "))
			cmd := exec.Command("go", args...)
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
