package diskqueue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// superseded says whether producer record i is one a later record
// replaces, in the compaction crash test: its compactor removes those, and
// only those may be lost.
func superseded(i int) bool { return i%3 == 1 }

// keepNotSuperseded is the crash test compactor's keep.
func keepNotSuperseded(rec diskqueue.Record) bool {
	_, i, ok := parseCrashBody(rec.Body)
	if !ok {
		crashtest.Report("bad-body-error", strconv.Quote(string(rec.Body)))
	}
	return !superseded(i)
}

// TestCompactCrashChild is the process TestCompactCrash kills: a producer
// ("put P-I" once Put returned), a consumer on cursor c that acknowledges
// every other record it reads ("got P-I" before, "fin P-I" once Ack
// returned), and a compactor that compacts every sealed segment as it
// appears, removing the superseded records.
func TestCompactCrashChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestCompactCrash")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_START"))
	opts := crashConfig()
	opts.MaxSegmentBytes = 8 << 10
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	c, err := l.Cursor("c", diskqueue.FromOldest())
	if err != nil {
		crashtest.Report("cursor-error", err)
		select {}
	}
	ctx := context.Background()
	// The producer lets the segments waiting for the writer to seal them,
	// and for the compactor (behind), grow to a few only: a producer with
	// no fsync outruns both (three fsyncs seal a segment), every segment
	// holds descriptors, and a compaction waits for its turn on the
	// writer goroutine.
	var behind atomic.Int64
	progress := make(chan struct{}, 1)
	go func() {
		for i := start; ; i++ {
			for behind.Load() > 4 {
				<-progress
			}
			if i%32 == 0 && unsealed(l) > 4 {
				if err := l.Sync(ctx); err != nil {
					crashtest.Report("sync-error", err)
					return
				}
			}
			if err := l.Put(ctx, crashBody(0, i)); err != nil {
				crashtest.Report("put-error", err)
				return
			}
			crashtest.Report("put", fmt.Sprintf("0-%d", i))
		}
	}()
	go func() {
		for {
			rec, err := c.Read(ctx)
			if err != nil {
				crashtest.Report("read-error", err)
				return
			}
			p, i, ok := parseCrashBody(rec.Body)
			if !ok {
				crashtest.Report("bad-body-error", strconv.Quote(string(rec.Body)))
				return
			}
			k := fmt.Sprintf("%d-%d", p, i)
			crashtest.Report("got", k)
			if i%2 == 1 {
				continue // stays in flight until the next run
			}
			if err := c.Ack(rec.Seq); err != nil {
				crashtest.Report("ack-error", err)
				return
			}
			crashtest.Report("fin", k)
		}
	}()
	go func() {
		done := map[uint64]bool{}
		for {
			var todo []uint64
			for _, s := range l.Segments() {
				if s.Sealed && !done[s.Base] {
					todo = append(todo, s.Base)
				}
			}
			behind.Store(int64(len(todo)))
			for _, base := range todo {
				_, err := l.Compact(ctx, base, keepNotSuperseded)
				switch {
				case err == nil, errors.Is(err, diskqueue.ErrNotFound):
					done[base] = true
				default:
					crashtest.Report("compact-error", err)
					return
				}
				crashtest.Report("compacted", base)
				behind.Add(-1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
			select {
			case progress <- struct{}{}:
			default:
			}
			if err := l.Sync(ctx); err != nil { // a writer round: new segments sealed
				crashtest.Report("sync-error", err)
				return
			}
		}
	}()
	select {} // until killed
}

// unsealed is how many segments rotated out wait for the writer to seal
// them.
func unsealed(l *diskqueue.Log) int {
	segs := l.Segments()
	n := 0
	for _, s := range segs[:len(segs)-1] { // the last is the active one
		if !s.Sealed {
			n++
		}
	}
	return n
}

// TestCompactCrash kills a process that writes, reads and compacts, with
// SIGKILL at random moments and at each step of a compaction
// (CompactCrashPoints), and checks after each kill that no Put that
// returned for a record that is not superseded is lost (every one the
// consumer had not finished is still readable with ReadAt and delivered by
// the cursor), nothing unknown or corrupt is served, no record is
// delivered twice, none finished before the kill is delivered again, Open
// leaves no compaction file behind and Verify finds nothing wrong.
func TestCompactCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	cycles := 6
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_CRASH_CYCLES")); err == nil {
		cycles = n
	}
	for _, config := range []string{"default", "sync1"} {
		t.Run(config, func(t *testing.T) {
			compactCrashCycles(t, config, cycles)
		})
	}
}

func compactCrashCycles(t *testing.T, config string, cycles int) {
	opts := crashConfigs[config]
	opts.MaxSegmentBytes = 8 << 10
	dir := t.TempDir()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	t.Logf("seed %d", seed)
	plan := make([]string, cycles) // "" is a random kill
	for range max(1, cycles/5) {
		plan = append(plan, diskqueue.CompactCrashPoints...) // each step, once per 5 random kills
	}
	compactions, puts, kept := 0, 0, 0
	for cycle, point := range plan {
		run := crashtest.Run{
			Test: "TestCompactCrashChild", Dir: dir,
			Env:       []string{"SPILLQ_CRASH_START=" + strconv.Itoa(cycle*10_000_000), "SPILLQ_CRASH_CONFIG=" + config},
			KillAfter: 200 + rng.IntN(3000), KillKind: "put",
		}
		if point != "" {
			run.Env = append(run.Env, "SPILLQ_CRASH_POINT="+point, "SPILLQ_CRASH_HIT="+strconv.Itoa(1+rng.IntN(3)))
			run.KillAfter = 500_000 // the child kills itself; this is the backstop
		}
		res := crashtest.Start(t, run)
		if point != "" && !res.KilledSelf {
			t.Fatalf("cycle %d: the child never reached crash point %s (%d puts, %d compactions)", cycle, point, len(res.Set("put")), len(res.Events["compacted"]))
		}
		compactions += len(res.Events["compacted"])
		put, got, finished := res.Set("put"), res.Set("got"), res.Set("fin")

		l, err := diskqueue.OpenLog(dir, opts)
		if err != nil {
			t.Fatalf("cycle %d (%s): open: %v", cycle, point, err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*.compact")); len(left) > 0 {
			t.Fatalf("cycle %d (%s): Open left %v", cycle, point, left)
		}
		st := l.Stats()
		stored := map[string]bool{}
		storedSeq := map[string]uint64{}
		for seq := st.FirstSeq; seq < st.WriteSeq; seq++ {
			rec, err := l.ReadAt(seq)
			if errors.Is(err, diskqueue.ErrNotFound) || errors.Is(err, diskqueue.ErrCompacted) {
				continue
			}
			if err != nil {
				t.Fatalf("cycle %d (%s): ReadAt(%d): %v", cycle, point, seq, err)
			}
			p, i, ok := parseCrashBody(rec.Body)
			if !ok || rec.Seq != seq {
				t.Fatalf("cycle %d (%s): ReadAt(%d) served seq %d %q", cycle, point, seq, rec.Seq, rec.Body)
			}
			stored[fmt.Sprintf("%d-%d", p, i)] = true
			storedSeq[fmt.Sprintf("%d-%d", p, i)] = seq
		}
		// A record the consumer got with an even i it may have
		// acknowledged just before the kill, before it could say so.
		mustKeep := func(k string) bool {
			_, i, _ := parseCrashBody(crashBodyOf(k))
			return !superseded(i) && !finished[k] && !(got[k] && i%2 == 0)
		}
		puts += len(put)
		for k := range put {
			if mustKeep(k) {
				kept++
			}
			if mustKeep(k) && !stored[k] {
				t.Fatalf("cycle %d (%s): put %s, not superseded and not finished, cannot be looked up", cycle, point, k)
			}
		}
		c, err := l.Cursor("c", diskqueue.FromOldest())
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(context.Background())
		cancel()
		delivered := map[string]bool{}
		last := -1
		for {
			rec, err := c.Read(done)
			if errors.Is(err, context.Canceled) {
				break
			}
			if err != nil {
				t.Fatalf("cycle %d (%s): Read: %v", cycle, point, err)
			}
			p, i, ok := parseCrashBody(rec.Body)
			k := fmt.Sprintf("%d-%d", p, i)
			switch {
			case !ok:
				t.Fatalf("cycle %d (%s): served a payload nobody put: %q", cycle, point, rec.Body)
			case delivered[k]:
				t.Fatalf("cycle %d (%s): %s delivered twice", cycle, point, k)
			case finished[k]:
				t.Fatalf("cycle %d (%s): %s was acknowledged before the kill and is delivered again", cycle, point, k)
			case i <= last:
				t.Fatalf("cycle %d (%s): out of order: %d after %d", cycle, point, i, last)
			}
			delivered[k], last = true, i
			if err := c.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
		}
		for k := range put {
			if mustKeep(k) && !delivered[k] {
				t.Fatalf("cycle %d (%s): put %s, not superseded and not finished, is not delivered (seq %d, stats %+v, cursor %+v, segments %+v, got %v)", cycle, point, k, storedSeq[k], l.Stats(), c.Stats(), l.Segments(), res.Set("got")[k])
			}
		}
		if st := l.Stats(); st.CorruptRecords != 0 {
			t.Fatalf("cycle %d (%s): %d corrupt records", cycle, point, st.CorruptRecords)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if rep, err := diskqueue.Verify(dir); err != nil || !rep.OK() {
			t.Fatalf("cycle %d (%s): Verify: %v, %v", cycle, point, rep.Problems, err)
		}
	}
	if compactions == 0 {
		t.Fatal("no compaction ran")
	}
	t.Logf("%d kills (%d at compaction steps), %d compactions, %d acknowledged puts, %d of them not superseded nor finished (each checked with ReadAt and the cursor)", len(plan), len(plan)-cycles, compactions, puts, kept)
}

// crashBodyOf is the body of the record named "P-I".
func crashBodyOf(k string) []byte {
	p, i, _ := strings.Cut(k, "-")
	pn, _ := strconv.Atoi(p)
	in, _ := strconv.Atoi(i)
	return crashBody(pn, in)
}
