package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// TestKeysSIGKILLAtDiskBudget: a keyed queue at MaxDiskBytes, consumers
// keeping up, SIGKILLed: the segments the key state's rebuild reads are
// held, and a Put at the cap must not delete them to make room (it did for
// a while: the rebuild then missed the records after the stored state).
//
//   - replace: v1 of a key stays in flight while v2 is put and finished
//     and filler fills the log past its cap many times; after the kill
//     v1 must not be delivered (v2, newer, was finished).
//   - dedup: fresh keys are put and finished at the cap for three times
//     the key state's store interval (past stores of it); after the kill
//     each must still be a duplicate.
//
// Found by a review, with the reproductions this test keeps.
func TestKeysSIGKILLAtDiskBudget(t *testing.T) {
	t.Run("replace", func(t *testing.T) {
		dir := t.TempDir()
		res := crashtest.Start(t, crashtest.Run{Test: "TestKeysAtDiskBudgetChild", Dir: dir, Env: []string{"SPILLQ_BUDGET_POLICY=replace"}})
		noChildErrors(t, 0, res)
		if !res.Has("fin", "v2") {
			t.Fatal("the child did not finish v2")
		}
		q, err := spillq.Open(dir, budgetKeysOpts("replace"))
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		// What was left: filler, and v1 if it came back. A superseded
		// version leaves Depth as the pump drops it, so a Receive may be
		// waiting when there is nothing more: each waits only a little.
		for deadline := time.Now().Add(5 * time.Second); q.Depth() > 0 && time.Now().Before(deadline); {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			m, err := q.Receive(ctx)
			cancel()
			if err != nil {
				continue
			}
			if string(m.Body) == "v1" {
				t.Fatal("after the SIGKILL v1 of the key was delivered, though v2, newer, was finished before it")
			}
			m.Finish()
		}
	})
	t.Run("dedup", func(t *testing.T) {
		dir := t.TempDir()
		res := crashtest.Start(t, crashtest.Run{Test: "TestKeysAtDiskBudgetChild", Dir: dir, Env: []string{"SPILLQ_BUDGET_POLICY=dedup"}})
		noChildErrors(t, 0, res)
		q, err := spillq.Open(dir, budgetKeysOpts("dedup"))
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		ctx := context.Background()
		again, full := 0, 0
		for k := range res.Set("put") {
			switch err := q.PutWith(ctx, []byte("again"), channel.PutOptions{Key: []byte(k)}); {
			case err == nil:
				again++
				m, err := q.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				m.Finish()
			case errors.Is(err, diskqueue.ErrDiskFull):
				full++ // this queue is at its cap too
			case !errors.Is(err, channel.ErrDuplicate):
				t.Fatal(err)
			}
		}
		t.Logf("child: %d keys put, %d Puts refused at the cap; after the kill %d let in again, %d refused at the cap", len(res.Set("put")), len(res.Events["full"]), again, full)
		if again > 0 {
			t.Fatalf("%d keys put within the dedup window were let in again after the SIGKILL", again)
		}
	})
}

// budgetKeySave is how often the child stores its key state.
const budgetKeySave = 100 * time.Millisecond

func budgetKeysOpts(policy string) spillq.Options {
	if policy == "replace" {
		return spillq.Options{Keys: channel.KeyReplace, Disk: diskqueue.Options{MaxDiskBytes: 64 << 10, MaxSegmentBytes: 4 << 10}}
	}
	return spillq.Options{Keys: channel.KeyDedup, DedupWindow: time.Hour, Disk: diskqueue.Options{MaxDiskBytes: 256 << 10, MaxSegmentBytes: 8 << 10}}
}

func TestKeysAtDiskBudgetChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestKeysSIGKILLAtDiskBudget")
	}
	policy := os.Getenv("SPILLQ_BUDGET_POLICY")
	spillq.SetKeySaveInterval(t, budgetKeySave)
	q, err := spillq.Open(dir, budgetKeysOpts(policy))
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	body := make([]byte, 100)
	// put puts one message and finishes it, reporting a refusal at the cap.
	put := func(b []byte, po channel.PutOptions) bool {
		err := q.PutWith(ctx, b, po)
		if errors.Is(err, diskqueue.ErrDiskFull) {
			crashtest.Report("full")
			time.Sleep(100 * time.Microsecond)
			return false
		}
		if err != nil {
			crashtest.Report("put-error", err)
			select {}
		}
		m, err := q.Receive(ctx)
		if err != nil {
			crashtest.Report("put-error", "receive:", err)
			select {}
		}
		m.Finish()
		return true
	}
	if policy == "replace" {
		key := channel.PutOptions{Key: []byte("K")}
		if err := q.PutWith(ctx, []byte("v1"), key); err != nil {
			crashtest.Report("put-error", err)
		}
		if _, err := q.Receive(ctx); err != nil { // v1, in flight until the kill
			crashtest.Report("put-error", "receive:", err)
		}
		time.Sleep(budgetKeySave * 3 / 2) // the key state (K: v1) stored
		for range 60 {
			put(body, channel.PutOptions{})
		}
		for !put([]byte("v2"), key) {
		}
		crashtest.Report("fin", "v2")
		for range 2000 {
			put(body, channel.PutOptions{})
		}
		crashtest.KillSelf()
	}
	began := time.Now()
	for i := 0; time.Since(began) < 3*budgetKeySave; i++ {
		k := fmt.Sprintf("k%d", i)
		if put(body, channel.PutOptions{Key: []byte(k)}) {
			crashtest.Report("put", k)
		}
	}
	crashtest.KillSelf()
}
