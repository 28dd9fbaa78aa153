package spillq_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// deadCrashPuts is how many messages TestDeadLetterKillChild puts; they
// then go round between the queue and the dead-letter store until the kill.
const deadCrashPuts = 2000

// TestDeadLetterKillChild is the process TestDeadLetterSIGKILL kills: a
// producer puts deadCrashPuts messages ("put N" once Put returned), a
// consumer fails every message it receives (MaxAttempts 1: each goes to the
// dead-letter store), and a redriver puts the store's letters back
// ("redriven" after each Redrive that moved any), so every message moves
// from the queue to the store and back again and again.
func TestDeadLetterKillChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok || os.Getenv("SPILLQ_DEAD_CHILD") == "" {
		t.Skip("run by TestDeadLetterSIGKILL")
	}
	disk := diskqueue.Options{MaxSegmentBytes: 32 << 10}
	if os.Getenv("SPILLQ_DEAD_CHILD") == "always" {
		disk.SyncEvery = 1
	}
	q, err := spillq.Open(dir, spillq.Options{MaxAttempts: 1, Disk: disk})
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	go func() {
		for i := range deadCrashPuts {
			if err := q.Put(ctx, body(i)); err != nil {
				crashtest.Report("put-error", err)
				return
			}
			crashtest.Report("put", i)
		}
	}()
	go func() {
		for {
			m, err := q.Receive(ctx)
			if err != nil {
				return
			}
			m.Fail(errors.New("cannot"))
		}
	}()
	for {
		n, err := q.DeadLetters().Redrive(ctx, spillq.DeadFilter{})
		if err != nil {
			crashtest.Report("redrive-error", strings.ReplaceAll(err.Error(), " ", "_"))
			select {}
		}
		if n > 0 {
			crashtest.Report("redriven", n)
		}
		time.Sleep(time.Millisecond) // let letters gather: batches, not one each
	}
}

// TestDeadLetterSIGKILL kills the process of TestDeadLetterKillChild at a
// random moment while messages move both ways between the queue and its
// dead-letter store, under each sync policy, and checks that every message
// whose Put returned is, after a restart, in the queue or in the store (a
// crash between the two halves of a move may leave it in both, never in
// neither).
func TestDeadLetterSIGKILL(t *testing.T) {
	cycles := killCycles(t, 3)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for _, sync := range []string{"always", "batch"} {
		dups := 0
		for cycle := range cycles {
			dir := t.TempDir()
			res := crashtest.Start(t, crashtest.Run{
				Test: "TestDeadLetterKillChild", Dir: dir,
				Env:       []string{"SPILLQ_DEAD_CHILD=" + sync},
				KillAfter: 5 + rng.IntN(60), KillKind: "redriven",
			})
			put := res.Set("put")
			q := open(t, dir, spillq.Options{})
			seen := map[string]int{}
			for dl, err := range q.DeadLetters().List(context.Background(), spillq.DeadFilter{}) {
				if err != nil {
					t.Fatalf("sync %s cycle %d: List: %v", sync, cycle, err)
				}
				seen[strings.TrimPrefix(string(dl.Body), "job-")]++
			}
			inStore := len(seen)
			for q.Depth() > 0 {
				m := recv(t, q)
				seen[strings.TrimPrefix(string(m.Body), "job-")]++
				m.Finish()
			}
			q.Close()
			for i := range put {
				k := strconv.Itoa(mustAtoi(t, i))
				k = strings.Repeat("0", 6-len(k)) + k
				if seen[k] == 0 {
					t.Fatalf("sync %s cycle %d: message %s was put and is neither in the queue nor in the dead-letter store after the kill (%d redrives seen)", sync, cycle, k, len(res.Events["redriven"]))
				}
			}
			for _, n := range seen {
				dups += n - 1
			}
			t.Logf("sync %s cycle %d: %d put, %d in the store, %d redrives before the kill", sync, cycle, len(put), inStore, len(res.Events["redriven"]))
		}
		t.Logf("sync %s: %d kills, %d messages found twice (a move cut short)", sync, cycles, dups)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
