package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// result is one benchmark's figures over its runs.
type result struct {
	name    string               // without the -N GOMAXPROCS suffix
	metrics map[string][]float64 // unit -> one value per run
}

// median and spread (half the range between the lowest and highest run,
// as a share of the median) of one metric.
func (r result) stat(unit string) (median, spread float64, ok bool) {
	v := append([]float64(nil), r.metrics[unit]...)
	if len(v) == 0 {
		return 0, 0, false
	}
	sort.Float64s(v)
	n := len(v)
	median = v[n/2]
	if n%2 == 0 {
		median = (v[n/2-1] + v[n/2]) / 2
	}
	if median != 0 {
		spread = (v[n-1] - v[0]) / 2 / median
	}
	return median, spread, true
}

// param returns the value of key=value in the benchmark name.
func (r result) param(key string) string {
	for _, part := range strings.Split(r.name, "/") {
		if v, ok := strings.CutPrefix(part, key+"="); ok {
			return v
		}
	}
	return ""
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse reads go test -bench output.
func parse(r io.Reader) ([]result, error) {
	byName := map[string]*result{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		res, ok := byName[m[1]]
		if !ok {
			res = &result{name: m[1], metrics: map[string][]float64{}}
			byName[m[1]] = res
			order = append(order, m[1])
		}
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", m[1], fields[i], err)
			}
			res.metrics[fields[i+1]] = append(res.metrics[fields[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]result, 0, len(order))
	for _, n := range order {
		out = append(out, *byName[n])
	}
	return out, nil
}

// writeTable writes every benchmark's median time (and throughput, where it
// has one, or a ratio benchmark's sides and speed-up) with its spread.
func writeTable(path string, results []result, machine string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# spillq benchmark results\n\nMachine: %s.\n\n", machine)
	b.WriteString("Each figure is the median of the runs, ± half the range between the fastest and slowest run. ")
	b.WriteString("Durability is what each side promises once its call returns: *memory* (a crash of the process loses it), *kernel* (in the page cache: it survives a crash of the process, not a power cut) or *disk* (fsynced).\n\n")
	b.WriteString("| Benchmark | time/op | throughput | runs | durability |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		t, ts, ok := r.stat("ns/op")
		if !ok {
			continue
		}
		thr := ""
		if mb, ms, ok := r.stat("MB/s"); ok {
			thr = fmt.Sprintf("%.1f MB/s ± %.0f%%", mb, ms*100)
		}
		if v, vs, ok := r.stat("jobs/s"); ok {
			thr += fmt.Sprintf(" %.0f jobs/s ± %.0f%%", v, vs*100)
		}
		for _, extra := range []string{"peak-RSS-MiB", "index-B/record"} {
			if v, _, ok := r.stat(extra); ok {
				thr += fmt.Sprintf(" %.2f %s", v, extra)
			}
		}
		// A ratio benchmark's sides, per record, and the speed-up.
		for _, side := range []string{"godq", "godiskqueue"} {
			if v, s, ok := r.stat(side + "-ns/rec"); ok {
				thr += fmt.Sprintf(" %s %s/record ± %.0f%%", side, duration(v), s*100)
			}
		}
		for _, x := range []string{"wall", "cpu"} {
			if v, s, ok := r.stat("x-" + x); ok {
				thr += fmt.Sprintf(" **%.2fx** %s ± %.0f%%", v, x, s*100)
			}
		}
		d := durability(r)
		if d == "" {
			d = "—"
		}
		fmt.Fprintf(&b, "| %s | %s ± %.0f%% | %s | %d | %s |\n", strings.TrimPrefix(r.name, "Benchmark"), duration(t), ts*100, thr, len(r.metrics["ns/op"]), d)
	}
	writeRatios(&b, results)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeRatios writes, for each job queue benchmark, how many times
// spillq's Worker's jobs per second each peer's are: medians of time per
// job, under the same promise (the name's durability).
func writeRatios(b *strings.Builder, results []result) {
	header := false
	for _, r := range results {
		if r.param("impl") != "spillq-worker" {
			continue
		}
		ours, _, ok := r.stat("ns/op")
		if !ok || ours == 0 {
			continue
		}
		prefix := strings.TrimSuffix(r.name, "impl=spillq-worker")
		for _, peer := range results {
			theirs, _, ok := peer.stat("ns/op")
			if !ok || peer.name == r.name || !strings.HasPrefix(peer.name, prefix) {
				continue
			}
			if !header {
				b.WriteString("\nJobs per second, spillq's Worker over each peer's (medians, same run, same durability):\n\n| Benchmark | peer | spillq's jobs/s over the peer's |\n| --- | --- | --- |\n")
				header = true
			}
			fmt.Fprintf(b, "| %s | %s | %.1fx |\n", strings.TrimPrefix(strings.TrimSuffix(prefix, "/"), "Benchmark"), peer.param("impl"), theirs/ours)
		}
	}
}

func duration(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	}
	return fmt.Sprintf("%.1f ns", ns)
}
