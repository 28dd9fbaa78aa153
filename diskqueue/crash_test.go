package diskqueue_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// crashOpts are the options both the child and the parent use: small
// segments so rotation, index sealing and deletion happen under fire.
var crashOpts = diskqueue.Options{SyncEvery: 1, MaxSegmentBytes: 16 << 10}

// crashBody is the payload of producer p's record i. It is derived from
// (p, i) alone, so the parent can tell a real payload from a made-up one.
func crashBody(p, i int) []byte {
	head := fmt.Sprintf("%d-%d-", p, i)
	return []byte(head + strings.Repeat(string(rune('a'+(p+i)%26)), 20+(i%50)))
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

// TestCrashChild is the process the crash test kills. It puts records with
// SyncEvery 1 and prints "put P I" after each Put returns; a consumer prints
// "got P I" before it acknowledges.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("SPILLQ_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_START"))
	opts := crashOpts
	if point := os.Getenv("SPILLQ_CRASH_POINT"); point != "" {
		// Die at the Nth pass of the named moment.
		hit, _ := strconv.Atoi(os.Getenv("SPILLQ_CRASH_HIT"))
		var hits atomic.Int64
		diskqueue.SetCrashPoint(&opts, func(p string) {
			if p == point && hits.Add(1) == int64(hit) {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		})
	}
	q, err := diskqueue.Open(dir, opts)
	if err != nil {
		fmt.Println("open-error", err)
		os.Exit(2)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		out.Unlock()
	}
	for p := 0; p < 4; p++ {
		go func() {
			for i := start; ; i++ {
				if err := q.Put(context.Background(), crashBody(p, i)); err != nil {
					say("put-error %v", err)
					return
				}
				say("put %d %d", p, i)
			}
		}()
	}
	go func() {
		for {
			rec, err := q.Read(context.Background())
			if err != nil {
				say("read-error %v", err)
				return
			}
			p, i, ok := parseCrashBody(rec.Body)
			if !ok {
				say("bad-body %q", rec.Body)
				return
			}
			say("got %d %d", p, i)
			q.Ack(rec.Seq)
		}
	}()
	select {} // until killed
}

// TestCrash kills a writing, reading process with SIGKILL at random moments
// and checks, after each kill, that every Put that returned is on disk or
// was consumed, nothing unknown is served, and each producer's order holds.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	cycles := 20
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_CRASH_CYCLES")); err == nil {
		cycles = n
	}
	dir := t.TempDir()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	// Random kills, then one kill at each named moment (inside rotation,
	// between a log write and its index write, while storing the cursor,
	// halfway through deleting a consumed segment).
	type kill struct{ point string }
	var plan []kill
	for i := 0; i < cycles; i++ {
		plan = append(plan, kill{})
	}
	for _, p := range diskqueue.CrashPoints {
		plan = append(plan, kill{point: p})
	}
	var totalAcked, totalFound int
	for cycle, k := range plan {
		start := cycle * 10_000_000
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SPILLQ_CRASH_DIR="+dir, "SPILLQ_CRASH_START="+strconv.Itoa(start))
		if k.point != "" {
			cmd.Env = append(cmd.Env, "SPILLQ_CRASH_POINT="+k.point, "SPILLQ_CRASH_HIT="+strconv.Itoa(1+rng.IntN(5)))
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := make(map[[2]int]bool)
		consumed := make(map[[2]int]bool)
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after the child has acknowledged a random number of puts,
		// so every cycle kills a process that is really writing.
		killAfter := 50 + rng.IntN(3000)
		if k.point != "" {
			killAfter = 200_000 // the child kills itself; this is the backstop
		}
		killed := false
		for line := range lines {
			var p, i int
			switch {
			case strings.HasPrefix(line, "put "):
				fmt.Sscanf(line, "put %d %d", &p, &i)
				acked[[2]int{p, i}] = true
			case strings.HasPrefix(line, "got "):
				fmt.Sscanf(line, "got %d %d", &p, &i)
				consumed[[2]int{p, i}] = true
			case strings.HasPrefix(line, "PASS"), strings.HasPrefix(line, "ok"), strings.HasPrefix(line, "=== RUN"):
			default:
				t.Fatalf("cycle %d: child said %q", cycle, line)
			}
			if cycle == 0 && len(acked) == 1 {
				// The child holds the directory: another process may not
				// open it.
				if _, err := diskqueue.Open(dir, crashOpts); !errors.Is(err, diskqueue.ErrLocked) {
					t.Fatalf("Open while another process has the queue: got %v, want ErrLocked", err)
				}
			}
			if !killed && len(acked) >= killAfter {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		err = cmd.Wait()
		if k.point != "" {
			if killed {
				t.Fatalf("cycle %d: the child never reached crash point %s", cycle, k.point)
			}
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
				t.Fatalf("cycle %d: child at crash point %s: want death by signal, got %v", cycle, k.point, err)
			}
		} else if !killed {
			t.Fatalf("cycle %d: child exited by itself", cycle)
		}

		q := openQueue(t, dir, crashOpts)
		// Every stored record can be looked up by seq, and holds a payload
		// someone put: check them all before consuming.
		st := q.Stats()
		stored := make(map[[2]int]bool)
		for seq := st.FirstSeq; seq < st.WriteSeq; seq++ {
			rec, err := q.ReadAt(seq)
			if err != nil {
				t.Fatalf("cycle %d: ReadAt(%d) of a stored record: %v", cycle, seq, err)
			}
			p, i, ok := parseCrashBody(rec.Body)
			if !ok || rec.Seq != seq {
				t.Fatalf("cycle %d: ReadAt(%d) served seq %d %q", cycle, seq, rec.Seq, rec.Body)
			}
			stored[[2]int{p, i}] = true
		}
		for k := range acked {
			if !stored[k] && !consumed[k] {
				t.Fatalf("cycle %d: acknowledged put %v cannot be looked up", cycle, k)
			}
		}
		found := make(map[[2]int]bool)
		last := make(map[int]int)
		for _, rec := range drain(t, q) {
			p, i, ok := parseCrashBody(rec.Body)
			if !ok {
				t.Fatalf("cycle %d: served a payload nobody put: %q", cycle, rec.Body)
			}
			k := [2]int{p, i}
			if found[k] {
				t.Fatalf("cycle %d: %v served twice", cycle, k)
			}
			if prev, seen := last[p]; seen && i <= prev {
				t.Fatalf("cycle %d: producer %d out of order: %d after %d", cycle, p, i, prev)
			}
			found[k], last[p] = true, i
		}
		if st := q.Stats(); st.CorruptRecords != 0 {
			t.Fatalf("cycle %d: %d corrupt records after a crash", cycle, st.CorruptRecords)
		}
		for k := range acked {
			if !found[k] && !consumed[k] {
				t.Fatalf("cycle %d: acknowledged put %v lost", cycle, k)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		totalAcked += len(acked)
		totalFound += len(found)
	}
	t.Logf("%d kills (%d random, %d at named points): %d acknowledged puts, %d recovered unconsumed", len(plan), cycles, len(diskqueue.CrashPoints), totalAcked, totalFound)
}
