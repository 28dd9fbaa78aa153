package godq_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue/godq"
	"github.com/spillq/spillq/internal/procstat"
)

// The drop-in against what it replaces: godq.NewCompat and
// github.com/nsqio/go-diskqueue v1.1.0, both through go-diskqueue's
// Interface with the settings nsqd passes by default (100 MiB files,
// messages of 26 bytes to 1 MiB and 26, fsync every 2,500 messages or
// 2 s). The bench matrix (cmd/bench) runs BenchmarkCompatRatio:
//
//	go test ./diskqueue/godq -run '^$' -bench CompatRatio -benchtime 1x -count 6
//
// What each side promises (cmd/bench prints it beside every figure): both
// Puts return with the record in the kernel (write(2) for go-diskqueue, a
// copy into a mapped segment for godq), fsynced every 2,500 records or
// 2 s; Close writes out and fsyncs the rest on both. A record taken from
// ReadChan is consumed on both: godq records that in the kernel before it
// offers the next record, go-diskqueue in its metadata file, written and
// fsynced every 2,500 reads or 2 s.

const (
	nsqdMaxBytesPerFile = 100 << 20
	nsqdMinMsgSize      = 26 // nsqd's minValidMessageLength: ID, timestamp, attempts
	nsqdMaxMsgSize      = 1<<20 + nsqdMinMsgSize
	nsqdSyncEvery       = 2500
	nsqdSyncTimeout     = 2 * time.Second
)

var compatImpls = []struct {
	name string
	open func(dir string) godiskqueue.Interface
}{
	{"godq", func(dir string) godiskqueue.Interface {
		return godq.NewCompat("bench", dir, nsqdMaxBytesPerFile, nsqdMinMsgSize, nsqdMaxMsgSize, nsqdSyncEvery, nsqdSyncTimeout, nopLogf)
	}},
	{"godiskqueue", func(dir string) godiskqueue.Interface {
		return godiskqueue.New("bench", dir, nsqdMaxBytesPerFile, nsqdMinMsgSize, nsqdMaxMsgSize, nsqdSyncEvery, nsqdSyncTimeout, nopLogf)
	}},
}

func nopLogf(godiskqueue.LogLevel, string, ...interface{}) {}

// compatCases are the workloads: Puts of one size (then Close, which on
// both sides writes out and fsyncs what is left, inside the timing), and
// the drain of a backlog of 100-byte records put beforehand (untimed, so
// the page cache is warm with them) and taken from ReadChan one by one,
// as nsqd's channel loop takes them. records is a round's count for
// BenchmarkCompatRatio.
var compatCases = []struct {
	op      string
	size    int
	records int
}{
	{"put", 100, 250_000},
	{"put", 65536, 2_000},
	{"drain", 100, 1_000_000},
}

// compatRun runs one case on one side with n records in a directory of
// its own and returns the wall and process CPU time of its timed part.
// stop and start pause and resume a benchmark's timer around the untimed
// Puts before a drain.
func compatRun(tb testing.TB, open func(string) godiskqueue.Interface, op string, size, n int, stop, start func()) (wall, cpu time.Duration) {
	body := make([]byte, size)
	dq := open(tb.TempDir())
	closed := false // go-diskqueue's second Close panics
	defer func() {
		if !closed {
			dq.Close()
		}
	}()
	if op == "drain" {
		stop()
		for range n {
			if err := dq.Put(body); err != nil {
				tb.Fatal(err)
			}
		}
		start()
	}
	t0, c0 := time.Now(), procstat.CPUTime()
	switch op {
	case "put":
		for range n {
			if err := dq.Put(body); err != nil {
				tb.Fatal(err)
			}
		}
		closed = true
		if err := dq.Close(); err != nil {
			tb.Fatal(err)
		}
	case "drain":
		ch := dq.ReadChan()
		for range n {
			if m := <-ch; len(m) != size {
				tb.Fatalf("read %d bytes, want %d", len(m), size)
			}
		}
	}
	wall, cpu = time.Since(t0), procstat.CPUTime()-c0
	if op == "drain" {
		if depth := dq.Depth(); depth != 0 {
			tb.Fatalf("Depth %d after the drain", depth)
		}
	}
	return wall, cpu
}

// BenchmarkCompat is every case on each side on its own, b.N records, for
// a profile of one side (-cpuprofile) or benchstat.
func BenchmarkCompat(b *testing.B) {
	for _, c := range compatCases {
		for _, impl := range compatImpls {
			b.Run(fmt.Sprintf("op=%s/size=%d/impl=%s", c.op, c.size, impl.name), func(b *testing.B) {
				b.SetBytes(int64(c.size))
				b.ReportAllocs()
				compatRun(b, impl.open, c.op, c.size, b.N, b.StopTimer, b.StartTimer)
			})
		}
	}
}

// compatRounds counts BenchmarkCompatRatio's rounds in this process, so
// that the side that goes first changes from one to the next.
var compatRounds int

// BenchmarkCompatRatio runs each case on both sides in turn, in one
// process, so that the machine's load as it changes falls on both alike:
// an iteration is one round, each case's records on one side and then on
// the other (godq first every other round). It reports, per record, each
// side's wall time (godq-ns/rec, godiskqueue-ns/rec), and godq's speed-up,
// go-diskqueue's time over godq's, in wall time (x-wall) and in the
// process's CPU time (x-cpu, which the machine's other load inflates
// less), each the median over the rounds. With -benchtime 1x every -count
// is one round, and a report of medians across the counts (cmd/bench's) is
// a median of rounds; ns/op is a round's time, both sides together.
func BenchmarkCompatRatio(b *testing.B) {
	for _, c := range compatCases {
		b.Run(fmt.Sprintf("op=%s/size=%d", c.op, c.size), func(b *testing.B) {
			var wall, cpu [2][]float64 // [side][round], per record
			for range b.N {
				for j := range compatImpls {
					i := j
					if compatRounds%2 == 1 {
						i = len(compatImpls) - 1 - j
					}
					w, u := compatRun(b, compatImpls[i].open, c.op, c.size, c.records, func() {}, func() {})
					wall[i] = append(wall[i], float64(w)/float64(c.records))
					cpu[i] = append(cpu[i], float64(u)/float64(c.records))
				}
				compatRounds++
			}
			ratio := func(t [2][]float64) float64 {
				x := make([]float64, len(t[0]))
				for r := range x {
					x[r] = t[1][r] / t[0][r]
				}
				return median(x)
			}
			b.ReportMetric(median(wall[0]), "godq-ns/rec")
			b.ReportMetric(median(wall[1]), "godiskqueue-ns/rec")
			b.ReportMetric(ratio(wall), "x-wall")
			b.ReportMetric(ratio(cpu), "x-cpu")
		})
	}
}

func median(x []float64) float64 {
	x = slices.Clone(x)
	slices.Sort(x)
	if len(x)%2 == 1 {
		return x[len(x)/2]
	}
	return (x[len(x)/2-1] + x[len(x)/2]) / 2
}
