package spillq_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// crashLoopMaxAttempts is the MaxAttempts of TestKillAttemptsChild.
const crashLoopMaxAttempts = 3

// TestKillAttemptsChild is the process TestCrashLoopDeadLetters runs again
// and again: a queue (or, with SPILLQ_TOPIC=1, a topic's channel) with
// MaxAttempts 3 whose handler SIGKILLs its own process on "poison"
// (reporting "poison" and the attempts it came with first), and finishes
// any other message (reporting "done" and its body), then kills itself
// too. Its DeadLetter hook appends the body to dead.txt, fsynced, and
// reports "dead". The first run (SPILLQ_PUT=1) puts "poison", then "later".
func TestKillAttemptsChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestCrashLoopDeadLetters")
	}
	deadLetter := func(m *channel.Message, reason error) error {
		f, err := os.OpenFile(filepath.Join(dir, "dead.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(string(m.Body) + "\n"); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		crashtest.Report("dead", string(m.Body))
		return nil
	}
	var put func(context.Context, []byte) error
	var recv func(context.Context) (*channel.Message, error)
	qdir := filepath.Join(dir, "q")
	if os.Getenv("SPILLQ_TOPIC") == "1" {
		tp, err := spillq.OpenTopic(qdir, spillq.TopicOptions{})
		if err != nil {
			crashtest.Report("open-error", err)
			return
		}
		ch, err := tp.Channel("work", spillq.ChannelOptions{MaxAttempts: crashLoopMaxAttempts, DeadLetter: deadLetter})
		if err != nil {
			crashtest.Report("open-error", err)
			return
		}
		put, recv = tp.Put, ch.Receive
	} else {
		q, err := spillq.Open(qdir, spillq.Options{MaxAttempts: crashLoopMaxAttempts, DeadLetter: deadLetter})
		if err != nil {
			crashtest.Report("open-error", err)
			return
		}
		put, recv = q.Put, q.Receive
	}
	ctx := context.Background()
	if os.Getenv("SPILLQ_PUT") == "1" {
		for _, b := range []string{"poison", "later"} {
			if err := put(ctx, []byte(b)); err != nil {
				crashtest.Report("put-error", err)
				return
			}
		}
	}
	for {
		m, err := recv(ctx)
		if err != nil {
			crashtest.Report("receive-error", err)
			return
		}
		if string(m.Body) == "poison" {
			crashtest.Report("poison", m.Attempts)
			crashtest.KillSelf() // the handler's crash: an OOM, a cgo fault
		}
		if err := m.Finish(); err != nil {
			crashtest.Report("finish-error", err)
			return
		}
		crashtest.Report("done", string(m.Body))
		crashtest.KillSelf()
	}
}

// TestCrashLoopDeadLetters: a message whose handler kills the process is
// delivered at most MaxAttempts times across the restarts, each with one
// attempt more, then dead-lettered (once), and the message behind it is
// processed: a crash loop ends. On a queue and on a topic's channel.
func TestCrashLoopDeadLetters(t *testing.T) {
	killCycles(t, 1)
	for _, topic := range []bool{false, true} {
		t.Run(map[bool]string{false: "queue", true: "topic"}[topic], func(t *testing.T) {
			dir := t.TempDir()
			var poisoned []string // the attempts each delivery of poison came with
			done := false
			for run := 0; run < crashLoopMaxAttempts+2 && !done; run++ {
				env := []string{"SPILLQ_TOPIC=" + map[bool]string{false: "0", true: "1"}[topic]}
				if run == 0 {
					env = append(env, "SPILLQ_PUT=1")
				}
				res := crashtest.Start(t, crashtest.Run{Test: "TestKillAttemptsChild", Dir: dir, Env: env})
				for _, kind := range []string{"open-error", "put-error", "receive-error", "finish-error"} {
					if e := res.Events[kind]; len(e) > 0 {
						t.Fatalf("run %d: the child reported %s %v", run, kind, e)
					}
				}
				poisoned = append(poisoned, res.Events["poison"]...)
				done = res.Has("done", "later")
			}
			want := []string{"1", "2", "3"}
			if !slices.Equal(poisoned, want) {
				t.Fatalf("poison delivered with attempts %v, want %v (then dead-lettered)", poisoned, want)
			}
			if !done {
				t.Fatal("the message behind poison was never processed")
			}
			b, err := os.ReadFile(filepath.Join(dir, "dead.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(string(b)); !slices.Equal(got, []string{"poison"}) {
				t.Fatalf("dead letters stored: %q, want [poison]", got)
			}
		})
	}
}

func receiveQ(t *testing.T, c consumer) *channel.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return m
}

// depthOf is the depth of the disk queue in dir, closed.
func depthOf(t *testing.T, dir string) int64 {
	t.Helper()
	q, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	return q.Depth()
}
