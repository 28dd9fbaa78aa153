package diskqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// crashConfigs are the option sets the crash test kills under, named for
// SPILLQ_CRASH_CONFIG: the default sync policy (a Put that returned is in
// the kernel, so a process crash must lose none) and fsync per record.
// Small segments make rotation, sealing and deletion happen under fire.
var crashConfigs = map[string]diskqueue.Options{
	"default": {MaxSegmentBytes: 64 << 10},
	"sync1":   {SyncEvery: 1, MaxSegmentBytes: 64 << 10},
}

// crashConfig is a crash child's options: SPILLQ_CRASH_CONFIG's, warnings
// to stderr, and a kill at the SPILLQ_CRASH_HIT-th pass of the moment
// SPILLQ_CRASH_POINT names, if it names one.
func crashConfig() diskqueue.Options {
	o, ok := crashConfigs[os.Getenv("SPILLQ_CRASH_CONFIG")]
	if !ok {
		o = crashConfigs["sync1"]
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if point := os.Getenv("SPILLQ_CRASH_POINT"); point != "" {
		hit, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_HIT"))
		var hits atomic.Int64
		diskqueue.SetCrashPoint(&o, func(p string) {
			if p == point && hits.Add(1) == int64(hit) {
				crashtest.KillSelf()
			}
		})
	}
	return o
}

// crashBody is the payload of producer p's record i. It is derived from
// (p, i) alone, so the parent can tell a real payload from a made-up one.
// One in 37 is over 1 KiB, so both ways into a mapped log are killed.
func crashBody(p, i int) []byte {
	head := fmt.Sprintf("%d-%d-", p, i)
	n := 20 + i%50
	if i%37 == 0 {
		n = 1500 + i%3000 // big enough for the mapped path's pwrite
	}
	return []byte(head + strings.Repeat(string(rune('a'+(p+i)%26)), n))
}

func parseCrashBody(b []byte) (p, i int, ok bool) {
	parts := strings.SplitN(string(b), "-", 3)
	if len(parts) != 3 {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(parts[0])
	i, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return p, i, string(crashBody(p, i)) == string(b)
}

// TestCrashChild is the process the crash test kills. Its producers report
// "put P-I" after each Put returns; a consumer reports "got P-I" before it
// acknowledges and "fin P-I" once Ack returned.
func TestCrashChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestCrash")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_START"))
	producers, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_PRODUCERS"))
	opts := crashConfig()
	q, err := diskqueue.Open(dir, opts)
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	startCrashProducers(q, max(producers, 1), start)
	go func() {
		for {
			rec, err := q.Read(context.Background())
			if err != nil {
				crashtest.Report("read-error", err)
				return
			}
			p, i, ok := parseCrashBody(rec.Body)
			if !ok {
				crashtest.Report("bad-body-error", strconv.Quote(string(rec.Body)))
				return
			}
			crashtest.Report("got", fmt.Sprintf("%d-%d", p, i))
			if err := q.Ack(rec.Seq); err != nil {
				crashtest.Report("ack-error", err)
				return
			}
			crashtest.Report("fin", fmt.Sprintf("%d-%d", p, i))
		}
	}()
	select {} // until killed
}

// startCrashProducers starts a crash child's producers: each puts its
// records from start on and reports "put P-I" after each Put returns.
//
// To be killed renaming a spare segment into place, the producers pause a
// little after each Put: a rotation finds a spare only if the writer made
// one while the active segment's second half filled, and at full speed the
// writer, sealing 64 KiB segments (several fsyncs each) about as fast as
// they fill, seldom gets to it (a few rotations in 200,000 Puts, some runs
// none).
func startCrashProducers(q putter, producers, start int) {
	var pause time.Duration
	if os.Getenv("SPILLQ_CRASH_POINT") == "spare-rename" {
		pause = 20 * time.Microsecond
	}
	for p := 0; p < producers; p++ {
		go func() {
			for i := start; ; i++ {
				if err := q.Put(context.Background(), crashBody(p, i)); err != nil {
					crashtest.Report("put-error", err)
					return
				}
				crashtest.Report("put", fmt.Sprintf("%d-%d", p, i))
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
}

// TestCrash kills a writing, reading process with SIGKILL, at random
// moments and at named ones (inside rotation, between a log write and its
// index write, while storing the cursor, halfway through deleting a
// consumed segment), and checks after each kill that every Put that
// returned is on disk (and can be looked up by seq) or was consumed,
// nothing unknown is served, each producer's order holds, and no record
// whose Ack returned is delivered again.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	cycles := 10
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_CRASH_CYCLES")); err == nil {
		cycles = n
	}
	for _, c := range []struct {
		config    string
		producers int
	}{{"default", 4}, {"default", 1}, {"sync1", 4}, {"sync1", 1}} {
		t.Run(fmt.Sprintf("%s/producers=%d", c.config, c.producers), func(t *testing.T) {
			crashCycles(t, c.config, c.producers, cycles)
		})
	}
}

func crashCycles(t *testing.T, config string, producers, cycles int) {
	crashOpts := crashConfigs[config]
	dir := t.TempDir()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	plan := make([]string, cycles) // "" is a random kill
	for _, p := range diskqueue.CrashPoints {
		if !slices.Contains(diskqueue.CompactCrashPoints, p) {
			plan = append(plan, p) // compaction's have their own campaign (TestCompactCrash)
		}
	}
	var totalAcked, totalFound int
	for cycle, point := range plan {
		run := crashtest.Run{
			Test: "TestCrashChild", Dir: dir,
			Env: []string{"SPILLQ_CRASH_START=" + strconv.Itoa(cycle*10_000_000),
				"SPILLQ_CRASH_CONFIG=" + config, "SPILLQ_CRASH_PRODUCERS=" + strconv.Itoa(producers)},
			KillAfter: 50 + rng.IntN(3000), KillKind: "put",
		}
		if point != "" {
			hit := 1 + rng.IntN(5)
			if point == "spare-rename" {
				// Only rotations that find a spare pass it, and with tiny
				// segments the writer is busy sealing and makes few.
				hit = 1
			}
			run.Env = append(run.Env, "SPILLQ_CRASH_POINT="+point, "SPILLQ_CRASH_HIT="+strconv.Itoa(hit))
			// The child kills itself; this is the backstop. A point
			// passed on time, not per Put (cursor-persist: at most every
			// 100 ms), needs hit tenths of a second of Puts, which a fast
			// child did not reach in 200,000.
			run.KillAfter = 2_000_000
		}
		if cycle == 0 {
			// While the child holds the directory, no other process may
			// open it.
			run.OnEvent = func(kind, _ string, n int) {
				if kind == "put" && n == 1 {
					if _, err := diskqueue.Open(dir, crashOpts); !errors.Is(err, diskqueue.ErrLocked) {
						t.Errorf("Open while another process has the queue: got %v, want ErrLocked", err)
					}
				}
			}
		}
		res := crashtest.Start(t, run)
		if point != "" && !res.KilledSelf {
			q := openQueue(t, dir, crashOpts)
			st := q.Stats()
			q.Close()
			t.Fatalf("cycle %d: the child never reached crash point %s (%d puts, %d got, %d fin; reopened: %+v)", cycle, point, len(res.Set("put")), len(res.Set("got")), len(res.Set("fin")), st)
		}
		acked, consumed, finished := res.Set("put"), res.Set("got"), res.Set("fin")

		q := openQueue(t, dir, crashOpts)
		// Every stored record can be looked up by seq, and holds a payload
		// someone put: check them all before consuming.
		st := q.Stats()
		stored := make(map[string]bool)
		for seq := st.FirstSeq; seq < st.WriteSeq; seq++ {
			rec, err := q.ReadAt(seq)
			if errors.Is(err, diskqueue.ErrNotFound) {
				// In a segment deleted because every record in it was
				// acknowledged, ahead of an older unacknowledged one.
				continue
			}
			if err != nil {
				t.Fatalf("cycle %d: ReadAt(%d) of a stored record: %v", cycle, seq, err)
			}
			p, i, ok := parseCrashBody(rec.Body)
			if !ok || rec.Seq != seq {
				t.Fatalf("cycle %d: ReadAt(%d) served seq %d %q", cycle, seq, rec.Seq, rec.Body)
			}
			stored[fmt.Sprintf("%d-%d", p, i)] = true
		}
		for k := range acked {
			if !stored[k] && !consumed[k] {
				t.Fatalf("cycle %d: acknowledged put %s cannot be looked up", cycle, k)
			}
		}
		found := make(map[string]bool)
		last := make(map[int]int)
		for _, rec := range drain(t, q) {
			p, i, ok := parseCrashBody(rec.Body)
			if !ok {
				t.Fatalf("cycle %d: served a payload nobody put: %q", cycle, rec.Body)
			}
			k := fmt.Sprintf("%d-%d", p, i)
			if found[k] {
				t.Fatalf("cycle %d: %s served twice", cycle, k)
			}
			if prev, seen := last[p]; seen && i <= prev {
				t.Fatalf("cycle %d: producer %d out of order: %d after %d", cycle, p, i, prev)
			}
			if finished[k] {
				t.Fatalf("cycle %d: %s was acknowledged by Ack before the kill and is delivered again", cycle, k)
			}
			found[k], last[p] = true, i
		}
		if st := q.Stats(); st.CorruptRecords != 0 {
			t.Fatalf("cycle %d: %d corrupt records after a crash", cycle, st.CorruptRecords)
		}
		for k := range acked {
			if !found[k] && !consumed[k] {
				t.Fatalf("cycle %d: acknowledged put %s lost", cycle, k)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		totalAcked += len(acked)
		totalFound += len(found)
	}
	t.Logf("%d kills (%d random, %d at named points): %d acknowledged puts, %d recovered unconsumed", len(plan), cycles, len(plan)-cycles, totalAcked, totalFound)
}
