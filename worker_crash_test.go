package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/crashtest"
)

// The worker campaign's jobs: a kind, then a number. ok, failonce (an
// error on its first attempt), panic (a panic on its first), and slow
// (20 ms) end finished; failalways and panicalways end dead-lettered.
var workerJobKinds = []string{"ok", "failonce", "panic", "slow", "failalways", "panicalways"}

const (
	workerCrashMaxAttempts = 3
	workerCrashConcurrency = 4
)

// TestWorkerKillChild is the process TestWorkerSIGKILL runs again and
// again: a Worker over a queue with MaxAttempts 3. It reports each
// attempt's start (the job and its attempts), each handler that returned
// nil ("end"), and each dead letter, which its hook first appends to
// dead.txt, fsynced. Once nothing is left to do it reports "all-done" and
// kills itself. The first run (SPILLQ_PUT=N) puts N jobs of each kind.
func TestWorkerKillChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestWorkerSIGKILL")
	}
	var deadMu sync.Mutex
	q, err := spillq.Open(filepath.Join(dir, "q"), spillq.Options{
		MaxAttempts: workerCrashMaxAttempts,
		DeadLetter: func(m *spillq.Message, reason error) error {
			deadMu.Lock()
			defer deadMu.Unlock()
			f, err := os.OpenFile(filepath.Join(dir, "dead.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := fmt.Fprintf(f, "%s\n", m.Body); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			crashtest.Report("dead", string(m.Body))
			return nil
		},
	})
	if err != nil {
		crashtest.Report("open-error", err)
		return
	}
	ctx := context.Background()
	if n, _ := strconv.Atoi(os.Getenv("SPILLQ_PUT")); n > 0 {
		for i := range n {
			for _, kind := range workerJobKinds {
				body := fmt.Sprintf("%s-%d", kind, i)
				if err := q.Put(ctx, []byte(body)); err != nil {
					crashtest.Report("put-error", err)
					return
				}
				crashtest.Report("put", body)
			}
		}
	}
	handle := func(ctx context.Context, m *spillq.Message) error {
		body := string(m.Body)
		crashtest.Report("start", fmt.Sprintf("%s@%d", body, m.Attempts))
		kind, _, _ := strings.Cut(body, "-")
		switch {
		case kind == "failonce" && m.Attempts == 1, kind == "failalways":
			return errors.New("fails")
		case kind == "panic" && m.Attempts == 1, kind == "panicalways":
			panic("boom")
		case kind == "slow":
			time.Sleep(20 * time.Millisecond)
		}
		crashtest.Report("end", body)
		return nil
	}
	w, err := spillq.NewWorker(q, handle, spillq.WorkerOptions{
		Concurrency: workerCrashConcurrency,
		Backoff:     func(uint16, error) time.Duration { return 0 },
	})
	if err != nil {
		crashtest.Report("open-error", err)
		return
	}
	go func() {
		// Drained: nothing waiting, in flight or deferred, twice, with no
		// answer in between (a message a Receive is taking is in no
		// count for an instant: see Channel.Depth).
		var last spillq.WorkerStats
		idle := 0
		for range time.Tick(5 * time.Millisecond) {
			st, ws := q.Stats(), w.Stats()
			if q.Depth() == 0 && st.InFlight == 0 && st.Deferred == 0 && ws == last && ws.InProgress == 0 {
				if idle++; idle == 2 {
					crashtest.Report("all-done")
					crashtest.KillSelf()
				}
			} else {
				idle = 0
			}
			last = ws
		}
	}()
	if err := w.Run(ctx); err != nil {
		crashtest.Report("run-error", err)
	}
}

// TestWorkerSIGKILL: workers over a queue, their process SIGKILLed at
// random moments while ok, failing, panicking and slow jobs run, and
// started again until nothing is left. Every job put ends as its kind
// says (finished, or dead-lettered once out of attempts); no attempt
// comes with more than MaxAttempts (the delivery journal counts those a
// kill cut short); and a job whose handler returned nil runs again only
// if a kill came before the worker's Finish: at most Concurrency of them
// per kill.
func TestWorkerSIGKILL(t *testing.T) {
	cycles := killCycles(t, 12)
	perKind := 20
	dir := t.TempDir()
	var (
		order []string // "start job" and "end job", as the children reported them
		puts  []string
		kills int
		done  bool
	)
	for run := 0; !done; run++ {
		if run > cycles+20 {
			t.Fatalf("not done after %d runs", run)
		}
		r := crashtest.Run{Test: "TestWorkerKillChild", Dir: dir,
			OnEvent: func(kind, id string, _ int) {
				if kind == "start" || kind == "end" {
					order = append(order, kind+" "+id)
				}
			}}
		if run == 0 {
			r.Env = []string{"SPILLQ_PUT=" + strconv.Itoa(perKind)}
		}
		if run < cycles {
			r.KillAfter, r.KillKind = 1+rand.IntN(25), "end"
		}
		res := crashtest.Start(t, r)
		for _, kind := range []string{"open-error", "put-error", "run-error"} {
			if e := res.Events[kind]; len(e) > 0 {
				t.Fatalf("run %d: the child reported %s %v", run, kind, e)
			}
		}
		puts = append(puts, res.Events["put"]...)
		done = len(res.Events["all-done"]) > 0
		if !done {
			kills++
		}
		order = append(order, "restart")
	}
	if len(puts) != perKind*len(workerJobKinds) {
		t.Fatalf("%d jobs put, want %d (the first run is not killed before its Puts return)", len(puts), perKind*len(workerJobKinds))
	}
	deadFile, err := os.ReadFile(filepath.Join(dir, "dead.txt"))
	if err != nil {
		t.Fatal(err)
	}
	dead := map[string]int{}
	for _, b := range strings.Fields(string(deadFile)) {
		dead[b]++
	}
	ended := map[string]bool{}
	lastAttempt := map[string]int{} // the attempts each job's last start came with
	rerunsAfterEnd := 0
	for _, e := range order {
		what, job, _ := strings.Cut(e, " ")
		switch what {
		case "end":
			ended[job] = true
		case "start":
			job, attempts, _ := strings.Cut(job, "@")
			if n, _ := strconv.Atoi(attempts); n < 1 || n > workerCrashMaxAttempts {
				t.Errorf("%s delivered with %s attempts, MaxAttempts is %d", job, attempts, workerCrashMaxAttempts)
			}
			if ended[job] {
				rerunsAfterEnd++
			}
			lastAttempt[job], _ = strconv.Atoi(attempts)
		}
	}
	for _, job := range puts {
		kind, _, _ := strings.Cut(job, "-")
		always := strings.HasSuffix(kind, "always")
		switch {
		case always && dead[job] == 0:
			t.Errorf("%s never dead-lettered", job)
		case !always && dead[job] > 0 && lastAttempt[job] != workerCrashMaxAttempts:
			// One in flight at kills enough to use up its attempts
			// (each counted in the journal) is dead-lettered as a job
			// that crashes the process would be; any other, never.
			t.Errorf("%s dead-lettered after a last start with %d attempts, though its kind finishes", job, lastAttempt[job])
		case !always && !ended[job] && dead[job] == 0:
			t.Errorf("%s neither finished nor dead-lettered", job)
		}
	}
	// A dead letter is acknowledged once its hook returned, so a kill
	// between the two hands it to the hook again (documented: a store
	// may get it twice, never lose it): at most one per handler a kill
	// cuts there.
	again := 0
	for _, n := range dead {
		again += n - 1
	}
	if again > kills*workerCrashConcurrency {
		t.Errorf("%d dead letters stored twice after %d kills: more than a kill can cut between a hook and its acknowledgement (%d each)", again, kills, workerCrashConcurrency)
	}
	if rerunsAfterEnd > kills*workerCrashConcurrency {
		t.Errorf("%d runs of jobs whose handler had returned nil, after %d kills: more than a kill can cut between a handler and its Finish (%d each)", rerunsAfterEnd, kills, workerCrashConcurrency)
	}
	t.Logf("%d runs, %d kills, %d jobs, %d dead letters (%d twice), %d reruns of a job after its handler returned nil", kills+1, kills, len(puts), len(dead), again, rerunsAfterEnd)
}
