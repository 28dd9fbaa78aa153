package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fixture = `goos: linux
goarch: amd64
cpu: Test CPU
BenchmarkPut/size=100/impl=spillq-2    	 7000000	       150.0 ns/op	 666.67 MB/s	       0 B/op	       0 allocs/op
BenchmarkPut/size=100/impl=spillq-2    	 7000000	       170.0 ns/op	 588.24 MB/s	       0 B/op	       0 allocs/op
BenchmarkPut/size=100/impl=spillq-2    	 7000000	       160.0 ns/op	 625.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkPut/size=100/impl=godiskqueue-2   	  600000	      2000 ns/op	  50.00 MB/s	       4 B/op	       1 allocs/op
BenchmarkPut/size=1024/impl=spillq-2    	 1000000	      1000 ns/op	 1024.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkPut/size=1024/impl=godiskqueue-2   	  400000	      3000 ns/op	  341.33 MB/s	       4 B/op	       1 allocs/op
BenchmarkLookup/records=10000/impl=index-2         	 1381414	       873.2 ns/op	     256 B/op	       4 allocs/op
BenchmarkLookup/records=1000000/impl=index-2       	  761502	      1556 ns/op	     256 B/op	       4 allocs/op
BenchmarkLookup/records=10000/impl=kafka-2         	  443226	      2754 ns/op	    4095 B/op	       1 allocs/op
BenchmarkLookup/records=1000000/impl=kafka-2       	  305998	      3549 ns/op	    4096 B/op	       1 allocs/op
BenchmarkDrainRSS/records=100000/impl=spillq-2         	       1	  42671162 ns/op	         8.809 peak-RSS-MiB
BenchmarkCompatRatio/op=drain/size=100-2         	       1	14823883988 ns/op	      3083 godiskqueue-ns/rec	       1009 godq-ns/rec	         1.996 x-cpu	         3.054 x-wall
PASS
`

func TestReportFromRuns(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte(fixture), 0o644)
	out := filepath.Join(dir, "out")
	if err := run(1, false, out, in, os.Stderr); err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cpu: Test CPU",
		"| Put/size=100/impl=spillq | 160.0 ns ± 6% | 625.0 MB/s ± 6% | 3 | " + spillqDefault + " |", // median of three, ±(170-150)/2/160
		"| Put/size=100/impl=godiskqueue | 2.00 µs ± 0% | 50.0 MB/s ± 0% | 1 | " + godqDefault + " |",
		"| Lookup/records=1000000/impl=index | 1.56 µs ± 0% |  | 1 | — |",
		"8.81 peak-RSS-MiB",
		"| CompatRatio/op=drain/size=100 | 14.82 s ± 0% |  godq 1.01 µs/record ± 0% godiskqueue 3.08 µs/record ± 0% **3.05x** wall ± 0% **2.00x** cpu ± 0% | 1 | godq: " + compatDefault + ". go-diskqueue: " + godqDefault + " |",
	} {
		if !strings.Contains(string(table), want) {
			t.Fatalf("results.md lacks %q:\n%s", want, table)
		}
	}
	for _, svg := range []string{"throughput.svg", "lookup.svg"} {
		b, err := os.ReadFile(filepath.Join(out, svg))
		if err != nil || !strings.Contains(string(b), "<svg") {
			t.Fatalf("%s: %v", svg, err)
		}
	}
}

// TestDurabilityOfEveryTimedSide: every speed the matrix measures of a
// store (a Put, a drain, a publish) states its promise, and the ones
// that are not speeds of a store state none.
func TestDurabilityOfEveryTimedSide(t *testing.T) {
	for name, want := range map[string]string{
		"BenchmarkPut/size=100/impl=spillq":                           spillqDefault,
		"BenchmarkPut/impl=bigqueue":                                  bigqueueNoFlush,
		"BenchmarkChannelPut/regime=memory/impl=spillq":               memoryOnly + " (MemQueueSize 4096, never full)",
		"BenchmarkChannelPut/regime=spill/impl=spillq":                "kernel; fsync every 2,500 records or 2 s (the message's envelope in the log; Puts alone, no Ack)",
		"BenchmarkDrain/size=100/impl=godiskqueue":                    godqDefault,
		"BenchmarkCompatRatio/op=drain/size=100":                      "godq: " + compatDefault + ". go-diskqueue: " + godqDefault,
		"BenchmarkCompat/op=drain/size=100/impl=godq":                 compatDefault,
		"BenchmarkCompat/op=drain/size=100/impl=godiskqueue":          godqDefault,
		"BenchmarkSyncEveryRecord/producers=16/impl=spillq":           "disk: fsync per record, group commit; Put returns after it",
		"BenchmarkSyncEveryRecord/producers=16/impl=godiskqueue":      "kernel: fsync per record, after its Put has returned",
		"BenchmarkMemoryPath/work=0/consumers=1/impl=barechan":        memoryOnly,
		"BenchmarkSpillPath/size=100/impl=nsqd-loop":                  godqDefault,
		"BenchmarkTopicPut/channels=4":                                spillqDefault + " (each channel's Finish)",
		"BenchmarkPublish/nodes=1/impl=bridge-accept":                 "kernel: in the local queue; forwarded to nsqd later",
		"BenchmarkLookup/records=10000/impl=kafka":                    "",
		"BenchmarkDrainRSS/records=100000/impl=spillq":                "",
		"BenchmarkOpen/records=10000":                                 "",
		"BenchmarkJobsDrain/durability=kernel/impl=spillq-worker":     workerKernel,
		"BenchmarkJobsDrain/durability=disk/impl=spillq-worker":       workerDisk,
		"BenchmarkJobsDrain/durability=kernel/impl=jetstream-acksync": jetstreamKernel + ackSyncKernel,
		"BenchmarkJobsDrain/durability=disk/impl=jetstream-acksync":   jetstreamDisk + ackSyncDisk,
		"BenchmarkJobsEndToEnd/durability=kernel/impl=jetstream-ack":  jetstreamKernel + ackAsync,
		"BenchmarkJobsDrain/durability=disk/impl=jetstream-ack":       jetstreamDisk + ackAsync,
	} {
		if got := durability(result{name: name}); got != want {
			t.Errorf("durability(%s) = %q, want %q", name, got, want)
		}
	}
}

// TestJobsRatio: the job queue rows show jobs/s, and the report compares
// spillq's Worker with each peer of the same benchmark and durability
// only.
func TestJobsRatio(t *testing.T) {
	const jobs = `BenchmarkJobsDrain/durability=kernel/impl=spillq-worker-2   20000   1000 ns/op   100.00 MB/s   1000000 jobs/s
BenchmarkJobsDrain/durability=kernel/impl=jetstream-acksync-2   20000   50000 ns/op   2.00 MB/s   20000 jobs/s
BenchmarkJobsDrain/durability=disk/impl=spillq-worker-2   20000   2000 ns/op   50.00 MB/s   500000 jobs/s
BenchmarkJobsDrain/durability=disk/impl=jetstream-acksync-2   20000   300000 ns/op   0.33 MB/s   3333 jobs/s
`
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte(fixture+jobs), 0o644) // fixture: the charts need their rows
	out := filepath.Join(dir, "out")
	if err := run(1, false, out, in, os.Stderr); err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| JobsDrain/durability=kernel/impl=spillq-worker | 1.00 µs ± 0% | 100.0 MB/s ± 0% 1000000 jobs/s ± 0% | 1 | " + workerKernel + " |",
		"| JobsDrain/durability=kernel | jetstream-acksync | 50.0x |",
		"| JobsDrain/durability=disk | jetstream-acksync | 150.0x |",
	} {
		if !strings.Contains(string(table), want) {
			t.Fatalf("results.md lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(string(table), "x |\n"); n != 2 {
		t.Fatalf("%d ratios, want 2 (one per durability):\n%s", n, table)
	}
}

func TestParseRejectsGarbageValues(t *testing.T) {
	if _, err := parse(strings.NewReader("BenchmarkX-2  10  abc ns/op\n")); err == nil {
		t.Fatal("accepted a non-numeric value")
	}
	if rs, err := parse(strings.NewReader("ok  pkg  1.2s\nPASS\n")); err != nil || len(rs) != 0 {
		t.Fatalf("non-benchmark lines: %v %v", rs, err)
	}
}

func TestNoResults(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("PASS\n"), 0o644)
	if err := run(1, false, filepath.Join(dir, "out"), in, os.Stderr); err == nil {
		t.Fatal("a report from no results")
	}
}

// TestFindRoot: bench is started in its own module's directory (go run -C
// cmd/bench) and must run the benchmarks of the spillq module above it, not
// of the nearest go.mod.
func TestFindRoot(t *testing.T) {
	top := t.TempDir()
	nested := filepath.Join(top, "cmd", "bench")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(top, "go.mod"), []byte("module github.com/spillq/spillq\n\ngo 1.25.0\n"), 0o644)
	os.WriteFile(filepath.Join(nested, "go.mod"), []byte("module github.com/spillq/spillq/cmd/bench\n"), 0o644)
	if got, err := findRoot(nested); err != nil || got != top {
		t.Fatalf("findRoot(%s) = %q, %v; want %q", nested, got, err, top)
	}
	if _, err := findRoot(t.TempDir()); err == nil {
		t.Fatal("found a spillq root outside any spillq module")
	}
	// This test runs in cmd/bench of the real repository.
	wd, _ := os.Getwd()
	root, err := findRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "diskqueue")); err != nil {
		t.Fatalf("root %s has no diskqueue/: %v", root, err)
	}
}
