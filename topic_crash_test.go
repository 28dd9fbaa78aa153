package spillq_test

import (
	"context"
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

// topicCrashChannels are the channels of TestTopicSIGKILL: one consuming
// as fast as it can, one that abandons a third of its messages (they would
// time out), one that falls behind (it takes a message in four rounds).
var topicCrashChannels = []string{"fast", "flaky", "slow"}

// TestKillTopicChild is the process TestTopicSIGKILL kills: four producers
// report "put N" once Topic.Put returns; each channel's consumer reports
// "fin-NAME N" just before it finishes a message and "done-NAME N" once
// Finish returned.
func TestKillTopicChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestTopicSIGKILL")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_KILL_START"))
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{Disk: diskqueue.Options{MaxSegmentBytes: 32 << 10}})
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	for _, name := range topicCrashChannels {
		ch, err := tp.Channel(name, spillq.ChannelOptions{Start: diskqueue.FromOldest()})
		if err != nil {
			crashtest.Report("channel-error", err)
			select {}
		}
		go func() {
			for n := 0; ; n++ {
				if name == "slow" && n%4 != 0 {
					time.Sleep(100 * time.Microsecond)
				}
				m, err := ch.Receive(ctx)
				if err != nil {
					return
				}
				i := strings.TrimPrefix(string(m.Body), "job-")
				if name == "flaky" && rand.IntN(3) == 0 {
					continue // dies with it in flight
				}
				crashtest.Report("fin-"+name, i)
				if m.Finish() == nil {
					crashtest.Report("done-"+name, i)
				}
			}
		}()
	}
	for p := 0; p < 4; p++ {
		go func() {
			for i := start + p; ; i += 4 {
				if err := tp.Put(ctx, body(i)); err != nil {
					crashtest.Report("put-error", err)
					return
				}
				crashtest.Report("put", strings.TrimPrefix(string(body(i)), "job-"))
			}
		}()
	}
	select {}
}

// TestTopicSIGKILL kills a process putting to a topic with three channels
// under the default options, at random moments, and checks each channel
// after a restart: no message whose Put returned is lost to it (delivered
// after the restart, or finished before the kill), and none whose Finish
// returned is delivered to it again. SPILLQ_KILL_CYCLES sets the number
// of kills.
func TestTopicSIGKILL(t *testing.T) {
	cycles := killCycles(t, 4)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	dir := t.TempDir()
	totalAcked := 0
	for cycle := range cycles {
		res := crashtest.Start(t, crashtest.Run{
			Test: "TestKillTopicChild", Dir: dir,
			Env:       []string{"SPILLQ_KILL_START=" + strconv.Itoa(cycle*1_000_000)},
			KillAfter: 200 + rng.IntN(3000), KillKind: "put",
		})
		acked := res.Set("put")
		totalAcked += len(acked)
		tp := openTopic(t, dir, spillq.TopicOptions{})
		for _, name := range topicCrashChannels {
			ch := topicChannel(t, tp, name, spillq.ChannelOptions{})
			finished, done := res.Set("fin-"+name), res.Set("done-"+name)
			delivered := map[string]bool{}
			for ch.Stats().BackendDepth > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				m, err := ch.Receive(ctx)
				cancel()
				if err != nil {
					t.Fatalf("cycle %d, channel %s: Receive: %v; %+v", cycle, name, err, ch.Stats())
				}
				k := strings.TrimPrefix(string(m.Body), "job-")
				if done[k] {
					t.Fatalf("cycle %d, channel %s: message %s was finished before the kill and is delivered again", cycle, name, k)
				}
				delivered[k] = true
				m.Finish()
			}
			lost := 0
			for i := range acked {
				if !delivered[i] && !finished[i] {
					lost++
				}
			}
			if lost > 0 {
				t.Fatalf("cycle %d, channel %s: lost %d of %d acknowledged puts", cycle, name, lost, len(acked))
			}
		}
		if err := tp.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills, %d acknowledged puts, each delivered to all %d channels, none lost, none finished redelivered", cycles, totalAcked, len(topicCrashChannels))
}
