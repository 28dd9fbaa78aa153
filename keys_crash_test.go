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
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/internal/crashtest"
)

// startKeyedProducers starts a crash child's producers: producer p puts
// "k:v" with key k (one of space keys, at random) for v = start+p, then
// every producers-th, pausing between Puts; it reports "put k:v" once Put
// returned nil, and stops at an error other than a duplicate
// ("put-error").
func startKeyedProducers(ctx context.Context, producers, start, space int, pause time.Duration, put func(context.Context, []byte, channel.PutOptions) error) {
	for p := range producers {
		go func() {
			for v := start + p; ; v += producers {
				if pause > 0 {
					time.Sleep(pause)
				}
				k := fmt.Sprintf("k%d", rand.IntN(space))
				err := put(ctx, []byte(fmt.Sprintf("%s:%d", k, v)), channel.PutOptions{Key: []byte(k)})
				switch {
				case err == nil:
					crashtest.Report("put", fmt.Sprintf("%s:%d", k, v))
				case !errors.Is(err, channel.ErrDuplicate):
					crashtest.Report("put-error", err)
					return
				}
			}
		}()
	}
}

// killCycles skips a SIGKILL test under -short, and returns how many kills
// it runs per configuration: SPILLQ_KILL_CYCLES, or def.
func killCycles(t *testing.T, def int) int {
	t.Helper()
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_KILL_CYCLES")); err == nil {
		return n
	}
	return def
}

// noChildErrors fails if a crash child reported an error of its own.
func noChildErrors(t *testing.T, cycle int, res crashtest.Result) {
	t.Helper()
	for _, kind := range []string{"open-error", "put-error", "compact-error"} {
		if e := res.Events[kind]; len(e) > 0 {
			t.Fatalf("cycle %d: the child reported %s %v", cycle, kind, e)
		}
	}
}

// compactForever is a crash child's compactor: it compacts again and
// again, reporting "compacted" for each compaction that removed records,
// until one fails ("compact-error").
func compactForever(ctx context.Context, compact func(context.Context) (spillq.CompactStats, error)) {
	for {
		st, err := compact(ctx)
		if err != nil {
			crashtest.Report("compact-error", err)
			return
		}
		if st.Removed > 0 {
			crashtest.Report("compacted", st.Removed)
		}
		time.Sleep(time.Millisecond)
	}
}

// keysCrashOptions are TestKillKeysChild's options, and its parent's:
// with compact, segments small enough for compaction to have sealed ones.
func keysCrashOptions(policy channel.KeyPolicy, compact bool) spillq.Options {
	opts := spillq.Options{Keys: policy, DedupWindow: time.Hour}
	if compact {
		opts.Disk.MaxSegmentBytes = 8 << 10
	}
	return opts
}

func keyPolicyByName(name string) channel.KeyPolicy {
	for _, p := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyReplace, channel.KeyDedup} {
		if p.String() == name {
			return p
		}
	}
	return channel.KeyNone
}

// TestKillKeysChild is the process TestKeysSIGKILL kills: producers put
// messages "k:v" with key k, reporting "put k:v" once Put returned nil; a
// consumer reports "fin k:v" before it finishes one. Under KeyReplace one
// producer puts, so that the reports are in put order; under KeyDedup the
// keys come from a space large enough for most to be new.
func TestKillKeysChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestKeysSIGKILL")
	}
	policy := keyPolicyByName(os.Getenv("SPILLQ_KEYS"))
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_KILL_START"))
	producers, space := 2, 20
	slow := os.Getenv("SPILLQ_KEYS_SLOW") == "1"
	switch policy {
	case channel.KeyUnique:
		space = 200 // most Puts are refused with 20
	case channel.KeyReplace:
		producers = 1
	case channel.KeyDedup:
		space = 1 << 20
	}
	compact := os.Getenv("SPILLQ_KEYS_COMPACT") == "1"
	q, err := spillq.Open(dir, keysCrashOptions(policy, compact))
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	if compact {
		// Beside the automatic compactions, as many more as fit.
		go compactForever(ctx, q.Compact)
	}
	var pause time.Duration
	if slow {
		pause = 200 * time.Microsecond
	}
	put := q.PutWith
	if os.Getenv("SPILLQ_KEYS_DELAY") == "1" {
		// Half deferred, so kept in the timer store rather than the log:
		// some for an hour, some due in a few milliseconds and finished.
		put = func(ctx context.Context, body []byte, po channel.PutOptions) error {
			switch rand.IntN(4) {
			case 0:
				po.Delay = time.Hour
			case 1:
				po.Delay = time.Duration(1+rand.IntN(50)) * time.Millisecond
			}
			return q.PutWith(ctx, body, po)
		}
	}
	startKeyedProducers(ctx, producers, start, space, pause, put)
	go func() {
		for {
			m, err := q.Receive(ctx)
			if err != nil {
				return
			}
			switch {
			case compact:
				time.Sleep(20 * time.Millisecond) // a backlog, for sealed segments to stay
			case rand.IntN(2) == 0:
				time.Sleep(100 * time.Microsecond)
			}
			crashtest.Report("fin", string(m.Body))
			m.Finish()
		}
	}()
	select {}
}

// TestKeysSIGKILL kills a process putting keyed messages under KeyUnique,
// KeyReplace and KeyDedup, and checks the policy's state after the
// restart against what the process acknowledged:
//
//   - KeyUnique: a key with a version put and not finished is pending:
//     Put of it is ErrDuplicate;
//   - KeyReplace: every version delivered is at least the newest put of its
//     key (older ones are superseded), and each key with a version put and
//     not finished delivers one; also with small segments compacted all
//     the time (a compaction removes no version but superseded ones);
//   - KeyDedup: every key put is a duplicate within the window; also with
//     half the Puts deferred, their messages in the timer store (a crash
//     forgot those put since the last store of the key state: the
//     rebuild read the log alone).
func TestKeysSIGKILL(t *testing.T) {
	cycles := killCycles(t, 2)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	type variant struct {
		policy  channel.KeyPolicy
		compact bool // small segments, compacted all the time
		delay   bool // half the Puts deferred
	}
	for _, vt := range []variant{{channel.KeyUnique, false, false}, {channel.KeyReplace, false, false}, {channel.KeyReplace, true, false}, {channel.KeyDedup, false, false}, {channel.KeyDedup, false, true}} {
		policy := vt.policy
		name := policy.String()
		if vt.compact {
			name += "-compact"
		}
		if vt.delay {
			name += "-delay"
		}
		t.Run(name, func(t *testing.T) {
			acked, compactions := 0, 0
			for cycle := range cycles {
				dir := t.TempDir()
				res := crashtest.Start(t, crashtest.Run{
					Test: "TestKillKeysChild", Dir: dir,
					// Every other run is slow enough to be killed after a few
					// stores of the key state (one a second), so Open reads
					// a snapshot and the tail after it; the others mostly
					// die before the first, and Open rebuilds from the log.
					Env:       []string{"SPILLQ_KEYS=" + policy.String(), "SPILLQ_KILL_START=0", "SPILLQ_KEYS_SLOW=" + strconv.Itoa(cycle%2), "SPILLQ_KEYS_COMPACT=" + map[bool]string{true: "1"}[vt.compact], "SPILLQ_KEYS_DELAY=" + map[bool]string{true: "1"}[vt.delay]},
					KillAfter: 100 + rng.IntN(2000) + cycle%2*(3000+rng.IntN(3000)), KillKind: "put",
				})
				if _, err := os.Stat(filepath.Join(dir, spillq.KeysDir, "state")); cycle%2 == 1 && err != nil {
					t.Fatalf("cycle %d: the slow run stored no key state before the kill: %v", cycle, err)
				}
				noChildErrors(t, cycle, res)
				compactions += len(res.Events["compacted"])
				puts, fins := res.Events["put"], res.Set("fin")
				acked += len(puts)
				newest := map[string]int{}      // key -> newest version put
				unfinished := map[string]bool{} // key -> a version put and not finished
				for _, kv := range puts {
					k, v := splitKV(t, kv)
					newest[k] = max(newest[k], v)
					if !fins[kv] {
						unfinished[k] = true
					}
				}
				q := open(t, dir, keysCrashOptions(policy, vt.compact))
				ctx := context.Background()
				switch policy {
				case channel.KeyUnique, channel.KeyDedup:
					for k := range newest {
						if policy == channel.KeyUnique && !unfinished[k] {
							continue
						}
						err := q.PutWith(ctx, []byte(k+":-1"), channel.PutOptions{Key: []byte(k)})
						if !errors.Is(err, channel.ErrDuplicate) {
							t.Fatalf("cycle %d: after the kill, Put of %s (put, %s) = %v, want ErrDuplicate", cycle, k, map[bool]string{true: "not finished", false: "finished"}[unfinished[k]], err)
						}
					}
				case channel.KeyReplace:
					delivered := map[string]bool{}
					drain(t, q, func() int64 { return q.Stats().BackendDepth }, func(m *channel.Message) {
						k, v := splitKV(t, m)
						if v < newest[k] {
							t.Fatalf("cycle %d: delivered %s:%d after the kill, superseded by %s:%d", cycle, k, v, k, newest[k])
						}
						delivered[k] = true
						m.Finish()
					})
					for k := range unfinished {
						if !delivered[k] {
							// Its newest version may have been finished, the
							// report of it lost with the kill.
							if fins[fmt.Sprintf("%s:%d", k, newest[k])] {
								continue
							}
							t.Fatalf("cycle %d: key %s had %s:%d put and not finished, and nothing of it was delivered", cycle, k, k, newest[k])
						}
					}
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s: %d kills, %d acknowledged keyed puts, %d compactions that removed records, the policy held after each", name, cycles, acked, compactions)
		})
	}
}

func splitKV[T *channel.Message | string](t *testing.T, x T) (string, int) {
	t.Helper()
	var s string
	switch x := any(x).(type) {
	case *channel.Message:
		s = string(x.Body)
	case string:
		s = x
	}
	k, v, ok := strings.Cut(s, ":")
	n, err := strconv.Atoi(v)
	if !ok || err != nil {
		t.Fatalf("bad message %q", s)
	}
	return k, n
}
