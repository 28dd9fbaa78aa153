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
	"github.com/spillq/spillq/channel"
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
// neither), and in the store once at most.
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
				k := strings.TrimPrefix(string(dl.Body), "job-")
				if seen[k]++; seen[k] > 1 {
					t.Fatalf("sync %s cycle %d: message %s has two letters in the store", sync, cycle, k)
				}
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

// TestDeadLetterOnceChild is the process TestDeadLetterAddedOnceAcrossKill
// runs twice in one directory. The first run (SPILLQ_DEAD_ONCE=kill) puts
// "poison", fails it, and its dead-letter handler stores it with the
// store's own Add, as the default handler does, then SIGKILLs the process
// before the channel acknowledges the message: the point between the two
// steps. The second run (default handler) gets the message again, fails it
// again and closes ("closed"), then kills itself too.
func TestDeadLetterOnceChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestDeadLetterAddedOnceAcrossKill")
	}
	kill := os.Getenv("SPILLQ_DEAD_ONCE") == "kill"
	var q *spillq.Queue
	opts := spillq.Options{}
	if kill {
		opts.DeadLetter = func(m *channel.Message, reason error) error {
			if err := q.DeadLetters().Add(m, reason); err != nil {
				return err
			}
			crashtest.Report("added", m.ID)
			crashtest.KillSelf()
			return nil
		}
	}
	q, err := spillq.Open(dir, opts)
	if err != nil {
		crashtest.Report("open-error", err)
		return
	}
	ctx := context.Background()
	if kill {
		if err := q.Put(ctx, []byte("poison")); err != nil {
			crashtest.Report("put-error", err)
			return
		}
	}
	m, err := q.Receive(ctx)
	if err != nil {
		crashtest.Report("receive-error", err)
		return
	}
	if err := m.Fail(errors.New("cannot")); err != nil {
		crashtest.Report("fail-error", err)
		return
	}
	if err := q.Close(); err != nil {
		crashtest.Report("close-error", err)
		return
	}
	crashtest.Report("closed")
	crashtest.KillSelf() // the harness wants every child dead by a signal
}

// TestDeadLetterAddedOnceAcrossKill: a message dead-lettered, its process
// SIGKILLed after the store had it and before the channel acknowledged it,
// comes back after the restart and is dead-lettered again; the store then
// lists it once, not twice (a redrive would have put it back twice).
func TestDeadLetterAddedOnceAcrossKill(t *testing.T) {
	killCycles(t, 1)
	dir := t.TempDir()
	first := crashtest.Start(t, crashtest.Run{Test: "TestDeadLetterOnceChild", Dir: dir, Env: []string{"SPILLQ_DEAD_ONCE=kill"}})
	if len(first.Events["added"]) != 1 {
		t.Fatalf("first run: want the letter added, then the kill; events %v", first.Events)
	}
	second := crashtest.Start(t, crashtest.Run{Test: "TestDeadLetterOnceChild", Dir: dir})
	if len(second.Events["closed"]) != 1 {
		t.Fatalf("second run: the message did not come back to be failed again; events %v", second.Events)
	}
	q := open(t, dir, spillq.Options{})
	defer q.Close()
	got := letters(t, q.DeadLetters())
	if len(got) != 1 || got[0].ID.String() != first.Events["added"][0] || q.DeadLetters().Len() != 1 {
		t.Fatalf("after a kill between the store's Add and the channel's acknowledgement, and the message dead-lettered again: %d letters (Len %d) %+v, want the one of message %s", len(got), q.DeadLetters().Len(), got, first.Events["added"][0])
	}
	if q.Depth() != 0 {
		t.Fatalf("the message is still in the queue (depth %d)", q.Depth())
	}
}
