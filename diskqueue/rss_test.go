package diskqueue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/procstat"
)

// BenchmarkDrainRSS measures the peak resident memory of a process that
// drains a queue of N 100-byte records, spillq beside go-diskqueue. Memory
// should stay flat as N grows. Each run drains a freshly filled queue in a
// child process:
//
//	go test ./diskqueue -run '^$' -bench DrainRSS -benchtime 1x
func BenchmarkDrainRSS(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, impl := range []string{"spillq", "godiskqueue"} {
			b.Run(fmt.Sprintf("records=%d/impl=%s", n, impl), func(b *testing.B) {
				for b.Loop() {
					dir := b.TempDir()
					fillForRSS(b, impl, dir, n)
					b.ReportMetric(childPeakRSS(b, "TestRSSChild", "SPILLQ_RSS_DIR="+dir, "SPILLQ_RSS_IMPL="+impl, "SPILLQ_RSS_N="+strconv.Itoa(n)), "peak-RSS-MiB")
				}
			})
		}
	}
}

func fillForRSS(b *testing.B, impl, dir string, n int) {
	body := make([]byte, 100)
	if impl == "godiskqueue" {
		dq := godiskqueue.New("rss", dir, 100<<20, 0, 1<<20, 1<<30, time.Hour, nopLog)
		for i := 0; i < n; i++ {
			dq.Put(body)
		}
		dq.Close()
		return
	}
	q, err := diskqueue.Open(dir, diskqueue.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		q.Put(context.Background(), body)
	}
	q.Close()
}

// childPeakRSS runs this test binary as a child for the named test and
// returns the peak RSS it reports, in MiB.
func childPeakRSS(b *testing.B, test string, env ...string) float64 {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if kb, ok := strings.CutPrefix(line, "peak-rss-kb "); ok {
			v, _ := strconv.Atoi(kb)
			return float64(v) / 1024
		}
	}
	b.Fatalf("child reported no peak RSS:\n%s", out)
	return 0
}

// TestRSSChild drains the queue BenchmarkDrainRSS filled and prints its
// peak RSS.
func TestRSSChild(t *testing.T) {
	dir := os.Getenv("SPILLQ_RSS_DIR")
	if dir == "" {
		t.Skip("run by BenchmarkDrainRSS")
	}
	n, _ := strconv.Atoi(os.Getenv("SPILLQ_RSS_N"))
	if os.Getenv("SPILLQ_RSS_IMPL") == "godiskqueue" {
		dq := godiskqueue.New("rss", dir, 100<<20, 0, 1<<20, 1<<30, time.Hour, nopLog)
		for i := 0; i < n; i++ {
			<-dq.ReadChan()
		}
		dq.Close()
	} else {
		q, err := diskqueue.Open(dir, diskqueue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := 0; i < n; i++ {
			rec, err := q.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			q.Ack(rec.Seq)
		}
		q.Close()
	}
	fmt.Printf("peak-rss-kb %d\n", procstat.PeakRSSKB())
}
