package spillq_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/internal/procstat"
)

// Benchmarks of message keys, each beside the same work without them in
// the same run:
//
//	go test -run '^$' -bench 'KeyedPut|SerialConsumers' -count 6 .
//	go test -run '^$' -bench KeyedPutRatio -benchtime 8x .

// BenchmarkKeyedPut: Put of 100-byte messages through spillq.Open
// (default options: every message to the disk log, nsqd's sync policy),
// without a key, with a key under no policy, and under each policy. Every
// message has a key of its own ("order-N"), so none is refused: the cost
// measured is the policy's bookkeeping, and for KeyUnique, KeyReplace and
// KeyDedup the record seq each Put reports back for the key state.
//
// It reports, beside the wall time, the process's CPU time per Put
// (cpu-ns/op), which the machine's other load inflates less.
//
// With table=growing nothing is finished, so under KeyUnique, KeyReplace
// and KeyDedup the table holds every key put (b.N of them: a map larger
// than the caches). With table=1000 the benchmark receives and finishes
// the messages after every 1,000 Puts (untimed, for every case alike), and
// KeyDedup's window is a millisecond, so the table stays about 1,000 keys,
// as in a queue whose consumers keep up.
func BenchmarkKeyedPut(b *testing.B) {
	for _, bounded := range []bool{false, true} {
		for _, c := range keyedCases {
			table := "growing"
			if bounded {
				table = "1000"
			}
			b.Run("table="+table+"/policy="+c.name, func(b *testing.B) {
				// Every key made before the clock starts, b.N fresh ones,
				// in every case alike, keyed or not: one array of bytes
				// and one of offsets, which hold no pointers. As b.N
				// slices of their own they were b.N objects that every
				// collection in the timed loop marked, for the keyed
				// cases only: a producer makes a key and lets it go.
				keys := newKeyList(b.N)
				b.ReportAllocs()
				b.ResetTimer()
				_, cpu := keyedPuts(b, c, bounded, keys, b.N)
				b.StopTimer()
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// keyedCase is one of BenchmarkKeyedPut's cases: a policy, and whether
// the messages have keys.
type keyedCase struct {
	name   string
	policy channel.KeyPolicy
	keyed  bool
}

var keyedCases = []keyedCase{
	{"nokey", channel.KeyNone, false},
	{"none", channel.KeyNone, true},
	{"unique", channel.KeyUnique, true},
	{"replace", channel.KeyReplace, true},
	{"dedup", channel.KeyDedup, true},
	{"serial", channel.KeySerial, true},
}

// keyedPuts opens a queue for c and puts n messages with keys[i] (with
// bounded, finishing them after every 1,000, untimed), and returns the
// wall and process CPU time of the Puts. Close, which stores the key
// state of every pending key, is not a Put's cost and is left out.
func keyedPuts(b *testing.B, c keyedCase, bounded bool, keys keyList, n int) (wall, cpu time.Duration) {
	b.Helper()
	b.StopTimer()
	body := make([]byte, 100)
	opts := spillq.Options{Keys: c.policy}
	if bounded {
		opts.DedupWindow = time.Millisecond
	}
	q, err := spillq.Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	// The process's CPU time over the timed part, every goroutine (the
	// log's writer, the channel's reader): a cost the machine's other
	// load does not inflate as much as it does the wall time.
	b.StartTimer()
	began, cpuBegan := time.Now(), procstat.CPUTime()
	for i := range n {
		var po channel.PutOptions
		if c.keyed {
			po.Key = keys.key(i)
		}
		if err := q.PutWith(ctx, body, po); err != nil {
			b.Fatal(err)
		}
		if bounded && (i+1)%1000 == 0 {
			b.StopTimer()
			wall += time.Since(began)
			cpu += procstat.CPUTime() - cpuBegan
			for range 1000 {
				m, err := q.Receive(ctx)
				if err != nil {
					b.Fatal(err)
				}
				m.Finish()
			}
			began, cpuBegan = time.Now(), procstat.CPUTime()
			b.StartTimer()
		}
	}
	wall += time.Since(began)
	cpu += procstat.CPUTime() - cpuBegan
	b.StopTimer()
	return wall, cpu
}

// BenchmarkKeyedPutRatio: BenchmarkKeyedPut's table=1000 cases as ratios
// to Put without a key, from runs alternated in one process, so that the
// machine's load as it changes falls on both sides alike: each iteration
// is one round, 100,000 Puts of every case in turn (the order reversed
// every other round), and the figures are the medians over the rounds of
// each case's time over the time without a key (P-x-wall, P-x-cpu for
// policy P; P-x-none is the wall ratio to a keyed Put under no policy,
// the policy's own cost). -benchtime 8x runs 8 rounds (after one the
// framework runs first).
//
//	go test -run '^$' -bench KeyedPutRatio -benchtime 8x .
func BenchmarkKeyedPutRatio(b *testing.B) {
	const n = 100_000
	keys := newKeyList(n)
	var wall, cpu [][]time.Duration // [round][case]
	for r := range b.N {
		w, c := make([]time.Duration, len(keyedCases)), make([]time.Duration, len(keyedCases))
		for j := range keyedCases {
			i := j
			if r%2 == 1 {
				i = len(keyedCases) - 1 - j
			}
			w[i], c[i] = keyedPuts(b, keyedCases[i], true, keys, n)
		}
		wall, cpu = append(wall, w), append(cpu, c)
	}
	median := func(x []float64) float64 {
		slices.Sort(x)
		if len(x)%2 == 1 {
			return x[len(x)/2]
		}
		return (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	ratio := func(t [][]time.Duration, i, base int) float64 {
		x := make([]float64, len(t))
		for r := range t {
			x[r] = float64(t[r][i]) / float64(t[r][base])
		}
		return median(x)
	}
	for i, c := range keyedCases {
		if i == 0 {
			continue
		}
		b.ReportMetric(ratio(wall, i, 0), c.name+"-x-wall")
		b.ReportMetric(ratio(cpu, i, 0), c.name+"-x-cpu")
		if i > 1 {
			b.ReportMetric(ratio(wall, i, 1), c.name+"-x-none")
		}
	}
}

// keyList is n keys "order-0" to "order-(n-1)", without a pointer per key.
type keyList struct {
	bytes []byte
	ends  []uint32
}

func newKeyList(n int) keyList {
	l := keyList{ends: make([]uint32, n)}
	for i := range n {
		l.bytes = strconv.AppendInt(append(l.bytes, "order-"...), int64(i), 10)
		l.ends[i] = uint32(len(l.bytes))
	}
	return l
}

// key returns key i. It is a slice of one array: cap is cut at its end, so
// nothing appending to it could write over the next key.
func (l keyList) key(i int) []byte {
	var from uint32
	if i > 0 {
		from = l.ends[i-1]
	}
	return l.bytes[from:l.ends[i]:l.ends[i]]
}

// BenchmarkSerialConsumers: 8 consumers Receive and Finish messages put
// with 1,000 keys under KeySerial (at most one per key in flight), beside
// the same without keys. Each iteration is one message put, delivered and
// finished; the messages are put first, then drained.
func BenchmarkSerialConsumers(b *testing.B) {
	body := make([]byte, 100)
	for _, serial := range []bool{false, true} {
		name := "keys=none"
		if serial {
			name = "keys=serial1000"
		}
		b.Run(name, func(b *testing.B) {
			opts := spillq.Options{}
			if serial {
				opts.Keys = channel.KeySerial
			}
			q, err := spillq.Open(b.TempDir(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			keys := make([][]byte, 1000)
			for i := range keys {
				keys[i] = []byte("account-" + strconv.Itoa(i))
			}
			for i := range b.N {
				var po channel.PutOptions
				if serial {
					po.Key = keys[i%len(keys)]
				}
				if err := q.PutWith(ctx, body, po); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			var mu sync.Mutex
			left := b.N
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						mu.Lock()
						if left == 0 {
							mu.Unlock()
							return
						}
						left--
						mu.Unlock()
						m, err := q.Receive(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						m.Finish()
					}
				}()
			}
			wg.Wait()
		})
	}
}
