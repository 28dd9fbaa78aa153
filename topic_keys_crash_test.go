package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// topicKeysCrashOptions are TestKillTopicKeysChild's options, and its
// parent's: segments small enough for compaction to have sealed ones.
func topicKeysCrashOptions(policy channel.KeyPolicy) spillq.TopicOptions {
	return spillq.TopicOptions{Keys: policy, DedupWindow: time.Hour, Disk: diskqueue.Options{MaxSegmentBytes: 8 << 10}}
}

var topicKeyCrashChannels = []string{"a", "b"}

// TestKillTopicKeysChild is the process TestTopicKeysSIGKILL kills: a
// topic under a key policy, with channels a and b; producers put "k:v"
// with key k, reporting "put k:v" once Put returned nil; each channel's
// consumer reports "fin-NAME k:v" before it finishes one (b slowly, so it
// lags). Under KeyReplace one producer puts, so the reports are in put
// order, and a goroutine compacts all the time.
func TestKillTopicKeysChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestTopicKeysSIGKILL")
	}
	policy := keyPolicyByName(os.Getenv("SPILLQ_KEYS"))
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_KILL_START"))
	producers, space := 2, 20
	switch policy {
	case channel.KeyUnique:
		space = 200
	case channel.KeyReplace:
		producers = 1
	case channel.KeyDedup:
		space = 1 << 20
	}
	tp, err := spillq.OpenTopic(dir, topicKeysCrashOptions(policy))
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	for i, name := range topicKeyCrashChannels {
		ch, err := tp.Channel(name, spillq.ChannelOptions{Start: diskqueue.FromOldest()})
		if err != nil {
			crashtest.Report("open-error", err)
			select {}
		}
		go func() {
			for {
				m, err := ch.Receive(ctx)
				if err != nil {
					return
				}
				time.Sleep(time.Duration(i) * 2 * time.Millisecond)
				crashtest.Report("fin-"+name, string(m.Body))
				m.Finish()
			}
		}()
	}
	if policy == channel.KeyReplace {
		go compactForever(ctx, tp.Compact)
	}
	startKeyedProducers(ctx, producers, start, space, 100*time.Microsecond, tp.PutWith)
	select {}
}

// TestTopicKeysSIGKILL kills a process putting keyed messages to a topic
// under KeyUnique, KeyReplace (compacting all the time) and KeyDedup, with
// two channels, and checks the policy after the restart against what the
// process acknowledged:
//
//   - KeyUnique: a key with a version put and not finished by a channel is
//     pending: Put of it is ErrDuplicate;
//   - KeyReplace: each channel delivers only versions at least the newest
//     put of their key, and each key with a version it had not finished;
//   - KeyDedup: every key put is a duplicate within the window.
func TestTopicKeysSIGKILL(t *testing.T) {
	cycles := killCycles(t, 2)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyReplace, channel.KeyDedup} {
		t.Run(policy.String(), func(t *testing.T) {
			acked, compactions := 0, 0
			for cycle := range cycles {
				dir := t.TempDir()
				res := crashtest.Start(t, crashtest.Run{
					Test: "TestKillTopicKeysChild", Dir: dir,
					Env:       []string{"SPILLQ_KEYS=" + policy.String(), "SPILLQ_KILL_START=0"},
					KillAfter: 200 + rng.IntN(3000), KillKind: "put",
				})
				noChildErrors(t, cycle, res)
				compactions += len(res.Events["compacted"])
				puts := res.Events["put"]
				acked += len(puts)
				newest := map[string]int{}
				// unfinished[ch][k]: a version of k put and not reported
				// finished by channel ch.
				unfinished := map[string]map[string]bool{}
				fins := map[string]map[string]bool{}
				for _, name := range topicKeyCrashChannels {
					unfinished[name], fins[name] = map[string]bool{}, res.Set("fin-"+name)
				}
				for _, kv := range puts {
					k, v := splitKV(t, kv)
					newest[k] = max(newest[k], v)
					for _, name := range topicKeyCrashChannels {
						if !fins[name][kv] {
							unfinished[name][k] = true
						}
					}
				}
				tp := openTopic(t, dir, topicKeysCrashOptions(policy))
				ctx := context.Background()
				switch policy {
				case channel.KeyUnique, channel.KeyDedup:
					for k := range newest {
						if policy == channel.KeyUnique && !unfinished["a"][k] && !unfinished["b"][k] {
							continue
						}
						err := tp.PutWith(ctx, []byte(k+":-1"), channel.PutOptions{Key: []byte(k)})
						if !errors.Is(err, channel.ErrDuplicate) {
							_, serr := os.Stat(filepath.Join(dir, spillq.KeysDir, "state"))
							idx := -1
							for i, kv := range puts {
								if kk, _ := splitKV(t, kv); kk == k {
									idx = i
								}
							}
							t.Fatalf("cycle %d: after the kill, Put of %s (unfinished by a %v, b %v) = %v, want ErrDuplicate (put %d of %d; state file: %v; log %+v)", cycle, k, unfinished["a"][k], unfinished["b"][k], err, idx, len(puts), serr, tp.Log().Stats())
						}
					}
				case channel.KeyReplace:
					for _, name := range topicKeyCrashChannels {
						ch := topicChannel(t, tp, name, spillq.ChannelOptions{})
						delivered := map[string]bool{}
						drain(t, ch, func() int64 { return channelDepth(tp, name) }, func(m *channel.Message) {
							k, v := splitKV(t, m)
							if v < newest[k] {
								t.Fatalf("cycle %d: %s delivered %s:%d after the kill, superseded by %s:%d", cycle, name, k, v, k, newest[k])
							}
							delivered[k] = true
							m.Finish()
						})
						for k := range unfinished[name] {
							if !delivered[k] && !fins[name][fmt.Sprintf("%s:%d", k, newest[k])] {
								t.Fatalf("cycle %d: %s had %s:%d put and not finished, and nothing of it was delivered", cycle, name, k, newest[k])
							}
						}
					}
				}
				if err := tp.Close(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%v: %d kills, %d acknowledged keyed puts, %d compactions that removed records, the policy held after each", policy, cycles, acked, compactions)
		})
	}
}
