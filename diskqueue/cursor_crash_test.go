package diskqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// crashCursors are the consumers of the multi-cursor crash test: one that
// keeps up, one that lags (it acknowledges out of order, in pairs), and
// one created after the first run at the next record.
var crashCursors = []string{"fast", "slow", "late"}

var cursorCrashOpts = diskqueue.Options{MaxSegmentBytes: 16 << 10}

// TestCursorCrashChild is the process TestCursorCrash kills: two producers
// over one log, and a consumer per cursor reporting "got-NAME P-I" before
// it acknowledges and "fin-NAME P-I" once Ack returned.
func TestCursorCrashChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestCursorCrash")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_START"))
	opts := cursorCrashOpts
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	for _, name := range crashCursors {
		if name == "late" && start == 0 {
			continue // created by the second run, at the end of the log
		}
		c, err := l.Cursor(name, diskqueue.FromNext())
		if err != nil {
			crashtest.Report("cursor-error", err)
			select {}
		}
		go func() {
			var held []diskqueue.Record
			for {
				rec, err := c.Read(context.Background())
				if err != nil {
					crashtest.Report("read-error", err)
					return
				}
				p, i, ok := parseCrashBody(rec.Body)
				if !ok {
					crashtest.Report("bad-body-error", strconv.Quote(string(rec.Body)))
					return
				}
				crashtest.Report("got-"+name, fmt.Sprintf("%d-%d", p, i))
				held = append(held, rec)
				if name == "slow" && len(held) < 2 {
					time.Sleep(50 * time.Microsecond)
					continue
				}
				// The slow one acknowledges the later of a pair first.
				for k := len(held) - 1; k >= 0; k-- {
					r := held[k]
					if err := c.Ack(r.Seq); err != nil {
						crashtest.Report("ack-error", err)
						return
					}
					p, i, _ := parseCrashBody(r.Body)
					crashtest.Report("fin-"+name, fmt.Sprintf("%d-%d", p, i))
				}
				held = held[:0]
			}
		}()
	}
	startCrashProducers(l, 2, start)
	select {} // until killed
}

// TestCursorCrash SIGKILLs a process with three cursors over one log at
// random moments, and checks for each cursor after every kill: every Put
// that returned and that the cursor had not consumed is delivered to it,
// in order per producer, and nothing it acknowledged comes back.
func TestCursorCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	cycles := 8
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_CRASH_CYCLES")); err == nil {
		cycles = n
	}
	dir := t.TempDir()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	var totalAcked int
	for cycle := 0; cycle < cycles; cycle++ {
		res := crashtest.Start(t, crashtest.Run{
			Test: "TestCursorCrashChild", Dir: dir,
			Env:       []string{"SPILLQ_CRASH_START=" + strconv.Itoa(cycle*10_000_000)},
			KillAfter: 200 + rng.IntN(3000), KillKind: "put",
		})
		acked := res.Set("put")
		totalAcked += len(acked)
		l := openLog(t, dir, cursorCrashOpts)
		want := len(crashCursors)
		if cycle == 0 {
			want--
		}
		if got := len(l.Cursors()); got != want {
			t.Fatalf("cycle %d: cursors %q after the kill, want %d", cycle, l.Cursors(), want)
		}
		for _, name := range l.Cursors() {
			c := openCursor(t, l, name, diskqueue.FromOldest())
			consumed, finished := res.Set("got-"+name), res.Set("fin-"+name)
			found := map[string]bool{}
			last := map[int]int{}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for {
				rec, err := c.Read(ctx)
				if errors.Is(err, context.Canceled) {
					break
				}
				if err != nil {
					t.Fatalf("cycle %d: cursor %s: Read: %v", cycle, name, err)
				}
				p, i, ok := parseCrashBody(rec.Body)
				if !ok {
					t.Fatalf("cycle %d: cursor %s: served a payload nobody put: %q", cycle, name, rec.Body)
				}
				k := fmt.Sprintf("%d-%d", p, i)
				if finished[k] {
					t.Fatalf("cycle %d: cursor %s: %s was acknowledged before the kill and is delivered again", cycle, name, k)
				}
				if found[k] {
					t.Fatalf("cycle %d: cursor %s: %s served twice", cycle, name, k)
				}
				if prev, seen := last[p]; seen && i <= prev {
					t.Fatalf("cycle %d: cursor %s: producer %d out of order: %d after %d", cycle, name, p, i, prev)
				}
				found[k], last[p] = true, i
				if err := c.Ack(rec.Seq); err != nil {
					t.Fatal(err)
				}
			}
			for k := range acked {
				if !found[k] && !consumed[k] {
					t.Fatalf("cycle %d: cursor %s: acknowledged put %s lost", cycle, name, k)
				}
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills, %d acknowledged puts, each checked on %d cursors", cycles, totalAcked, len(crashCursors))
}
