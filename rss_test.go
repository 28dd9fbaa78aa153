package spillq_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/procstat"
)

// BenchmarkSpilledRSS measures the peak resident memory of a process whose
// channel (MemQueueSize 10000) has N 100-byte messages put and none
// consumed, so all but 10000 spill to disk. Memory is bounded by
// MemQueueSize, not by the backlog:
//
//	go test . -run '^$' -bench SpilledRSS -benchtime 1x
func BenchmarkSpilledRSS(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "-test.run=^TestSpilledRSSChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), "SPILLQ_RSS_DIR="+b.TempDir(), "SPILLQ_RSS_N="+strconv.Itoa(n))
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				var kb int
				for _, line := range strings.Split(string(out), "\n") {
					if v, ok := strings.CutPrefix(line, "peak-rss-kb "); ok {
						kb, _ = strconv.Atoi(v)
					}
				}
				if kb == 0 {
					b.Fatalf("no figure from the child:\n%s", out)
				}
				b.ReportMetric(float64(kb)/1024, "peak-RSS-MiB")
			}
		})
	}
}

func TestSpilledRSSChild(t *testing.T) {
	dir := os.Getenv("SPILLQ_RSS_DIR")
	if dir == "" {
		t.Skip("run by BenchmarkSpilledRSS")
	}
	n, _ := strconv.Atoi(os.Getenv("SPILLQ_RSS_N"))
	q, err := spillq.Open(dir, spillq.Options{MemQueueSize: 10000})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 100)
	for i := 0; i < n; i++ {
		// Each message its own body: the channel keeps the slice it is given.
		if err := q.Put(context.Background(), append([]byte(nil), body...)); err != nil {
			t.Fatal(err)
		}
	}
	st := q.Stats()
	if st.MemoryDepth != 10000 || st.DiskDepth != int64(n-10000) {
		t.Fatalf("memory %d, disk %d", st.MemoryDepth, st.DiskDepth)
	}
	fmt.Printf("peak-rss-kb %d\n", procstat.PeakRSSKB())
	q.Close()
}
