package spillq_test

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
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"
	"go.uber.org/goleak"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// End-to-end tests of the wired system: channel over a real disk queue.

func open(t *testing.T, dir string, o spillq.Options) *spillq.Queue {
	t.Helper()
	q, err := spillq.Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func recv(t *testing.T, q *spillq.Queue) *channel.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := q.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return m
}

func body(i int) []byte { return []byte(fmt.Sprintf("job-%06d", i)) }

func index(t *testing.T, m *channel.Message) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(string(m.Body), "job-"))
	if err != nil {
		t.Fatalf("unknown payload %q", m.Body)
	}
	return i
}

func TestMemoryOnlyNeverTouchesDisk(t *testing.T) {
	q := open(t, t.TempDir(), spillq.Options{MemQueueSize: 1000})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		q.Put(ctx, body(i))
	}
	for i := 0; i < 500; i++ {
		m := recv(t, q)
		if index(t, m) != i {
			t.Fatalf("got %q, want %d", m.Body, i)
		}
		m.Finish()
	}
	if st := q.Stats(); st.Spills != 0 || q.Disk().Stats().Puts != 0 {
		t.Fatalf("memory path wrote to disk: %+v", st)
	}
}

// TestSpillAndDrain: a producer faster than its consumers fills the memory
// buffer; the rest goes to disk; consumers catch up and drain both, in put
// order, and the disk is left empty.
func TestSpillAndDrain(t *testing.T) {
	q := open(t, t.TempDir(), spillq.Options{MemQueueSize: 100, Disk: diskqueue.Options{MaxSegmentBytes: 16 << 10}})
	defer q.Close()
	const n = 20000
	ctx := context.Background()
	go func() {
		for i := 0; i < n; i++ {
			if err := q.Put(ctx, body(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < n; i++ {
		m := recv(t, q)
		if got := index(t, m); got != i {
			t.Fatalf("message %d: got %d: order broken across the spill", i, got)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	st := q.Stats()
	if st.Spills == 0 {
		t.Fatal("nothing spilled")
	}
	if err := q.Disk().Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ds := q.Disk().Stats()
	if ds.Depth != 0 || ds.Segments != 1 {
		t.Fatalf("disk after draining: depth %d, %d segments", ds.Depth, ds.Segments)
	}
	t.Logf("%d messages, %d spilled to disk", n, st.Spills)
}

// TestGracefulRestart: Close writes memory and in-flight messages to disk;
// reopening delivers every unfinished message exactly once.
func TestGracefulRestart(t *testing.T) {
	dir := t.TempDir()
	o := spillq.Options{MemQueueSize: 50}
	q := open(t, dir, o)
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		q.Put(ctx, body(i))
	}
	finished := map[int]bool{}
	for i := 0; i < 10; i++ {
		m := recv(t, q)
		if i%2 == 0 {
			m.Finish()
			finished[index(t, m)] = true
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, o)
	defer q.Close()
	seen := map[int]int{}
	for len(seen) < 200-len(finished) {
		m := recv(t, q)
		seen[index(t, m)]++
		m.Finish()
	}
	for i := 0; i < 200; i++ {
		if want := map[bool]int{true: 0, false: 1}[finished[i]]; seen[i] != want {
			t.Fatalf("message %d delivered %d times after restart, want %d", i, seen[i], want)
		}
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after draining", d)
	}
}

// TestConsumerDiesMessagesRedelivered: a consumer that takes messages and
// never finishes them loses nothing; they time out and go to another.
func TestConsumerDiesMessagesRedelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := open(t, t.TempDir(), spillq.Options{MemQueueSize: 5, MsgTimeout: 30 * time.Second})
		defer q.Close()
		ctx := context.Background()
		for i := 0; i < 10; i++ {
			q.Put(ctx, body(i))
		}
		for i := 0; i < 3; i++ {
			if _, err := q.Receive(ctx); err != nil { // the dying consumer
				t.Fatal(err)
			}
		}
		got := map[int]bool{}
		for len(got) < 10 {
			m, err := q.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got[index(t, m)] = true
			m.Finish()
		}
		if st := q.Stats(); st.Timeouts != 3 {
			t.Fatalf("Timeouts %d, want 3", st.Timeouts)
		}
	})
}

func TestRequeueDeferMaxAttemptsPauseEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead []string
		var mu sync.Mutex
		dir := t.TempDir()
		o := spillq.Options{MemQueueSize: 10, MaxAttempts: 2, DeadLetter: func(m *channel.Message, _ error) {
			mu.Lock()
			dead = append(dead, string(m.Body))
			mu.Unlock()
		}}
		q := open(t, dir, o)
		ctx := context.Background()
		start := time.Now()
		q.PutWith(ctx, []byte("deferred"), channel.PutOptions{Delay: 10 * time.Minute})
		q.Put(ctx, []byte("flaky"))
		m, _ := q.Receive(ctx)
		m.Requeue(time.Minute) // attempt 1 failed; back in a minute
		m, _ = q.Receive(ctx)
		if string(m.Body) != "flaky" || m.Attempts != 2 || time.Since(start) < time.Minute {
			t.Fatalf("requeue: got %q attempt %d after %v", m.Body, m.Attempts, time.Since(start))
		}
		m.Requeue(0) // attempt 2 failed: out of attempts
		mu.Lock()
		if len(dead) != 1 || dead[0] != "flaky" {
			t.Fatalf("dead letters %v", dead)
		}
		mu.Unlock()

		// The deferred message survives a restart with its due time.
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir, o)
		defer q.Close()
		q.Pause()
		got := make(chan *channel.Message)
		go func() { m, _ := q.Receive(ctx); got <- m }()
		time.Sleep(20 * time.Minute) // virtual time (synctest)
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("delivered while paused")
		default:
		}
		q.Unpause()
		m = <-got
		if string(m.Body) != "deferred" || time.Since(start) < 10*time.Minute {
			t.Fatalf("got %q after %v", m.Body, time.Since(start))
		}
		m.Finish()

		for i := 0; i < 30; i++ {
			q.Put(ctx, body(i))
		}
		if err := q.Empty(); err != nil {
			t.Fatal(err)
		}
		if q.Depth() != 0 || q.Disk().Depth() != 0 {
			t.Fatalf("after Empty: depth %d, disk %d", q.Depth(), q.Disk().Depth())
		}
	})
}

func TestCompressedSpill(t *testing.T) {
	q := open(t, t.TempDir(), spillq.Options{Disk: diskqueue.Options{Compress: true}})
	defer q.Close()
	big := []byte(strings.Repeat("compressible ", 1000))
	q.Put(context.Background(), big)
	m := recv(t, q)
	if string(m.Body) != string(big) {
		t.Fatal("body changed through a compressed spill")
	}
	q.Disk().Sync(context.Background())
	if st := q.Disk().Stats(); st.DiskBytes > int64(len(big))/2 {
		t.Fatalf("not compressed: %d bytes on disk for a %d-byte body", st.DiskBytes, len(big))
	}
}

// TestGoDiskQueueBackend runs the channel over nsqd's own disk queue.
func TestGoDiskQueueBackend(t *testing.T) {
	dq := godiskqueue.New("jobs", t.TempDir(), 1<<20, 0, 1<<20, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
	c, err := channel.New(channel.Options{MemQueueSize: 10, Backend: channel.GoDiskQueue(dq)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		c.Put(ctx, body(i))
	}
	for i := 0; i < 100; i++ {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Body) != string(body(i)) {
			t.Fatalf("got %q, want %q", m.Body, body(i))
		}
		m.Finish()
	}
	if st := c.Stats(); st.Spills != 90 {
		t.Fatalf("Spills %d, want 90", st.Spills)
	}
}

// TestKillChild is the process TestSIGKILLLosesNoAcknowledgedPut kills.
func TestKillChild(t *testing.T) {
	dir := os.Getenv("SPILLQ_KILL_DIR")
	if dir == "" {
		t.Skip("run by TestSIGKILLLosesNoAcknowledgedPut")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_KILL_START"))
	q, err := spillq.Open(dir, spillq.Options{Disk: diskqueue.Options{SyncEvery: 1, MaxSegmentBytes: 32 << 10}})
	if err != nil {
		fmt.Println("open-error", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	say := func(f string, a ...any) { mu.Lock(); fmt.Printf(f+"\n", a...); mu.Unlock() }
	ctx := context.Background()
	for p := 0; p < 4; p++ {
		go func() {
			for i := start + p; ; i += 4 {
				if err := q.Put(ctx, body(i)); err != nil {
					say("put-error %v", err)
					return
				}
				say("put %d", i)
			}
		}()
	}
	go func() {
		for {
			m, err := q.Receive(ctx)
			if err != nil {
				return
			}
			i, _ := strconv.Atoi(strings.TrimPrefix(string(m.Body), "job-"))
			if rand.IntN(3) == 0 {
				continue // dies on this one: never finished
			}
			if m.Finish() == nil {
				say("fin %d", i)
			}
		}
	}()
	select {}
}

// TestSIGKILLLosesNoAcknowledgedPut: with MemQueueSize 0 and SyncEvery 1, a
// process killed with SIGKILL loses no message whose Put returned: after a
// restart each is delivered, unless it was finished before the kill.
func TestSIGKILLLosesNoAcknowledgedPut(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	cycles := 10
	if n, err := strconv.Atoi(os.Getenv("SPILLQ_KILL_CYCLES")); err == nil {
		cycles = n
	}
	var totalAcked int
	for cycle := 0; cycle < cycles; cycle++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SPILLQ_KILL_DIR="+dir, "SPILLQ_KILL_START="+strconv.Itoa(cycle*1_000_000))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked, finished := map[int]bool{}, map[int]bool{}
		killAt := 100 + rng.IntN(1000)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var i int
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "put "):
				fmt.Sscanf(line, "put %d", &i)
				acked[i] = true
			case strings.HasPrefix(line, "fin "):
				fmt.Sscanf(line, "fin %d", &i)
				finished[i] = true
			case strings.HasPrefix(line, "=== RUN"):
			default:
				t.Fatalf("child: %q", line)
			}
			if len(acked) == killAt {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		cmd.Wait()

		q := open(t, dir, spillq.Options{})
		delivered := map[int]bool{}
		for q.Depth() > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m, err := q.Receive(ctx)
			cancel()
			if err != nil {
				t.Fatalf("cycle %d: Receive: %v; channel %+v; disk %+v", cycle, err, q.Stats(), q.Disk().Stats())
			}
			delivered[index(t, m)] = true
			m.Finish()
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		for i := range acked {
			if !delivered[i] && !finished[i] {
				t.Fatalf("cycle %d: message %d was acknowledged by Put and is gone", cycle, i)
			}
		}
		totalAcked += len(acked)
	}
	t.Logf("%d kills: %d acknowledged puts, none lost", cycles, totalAcked)
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{})
	defer q.Close()
	if _, err := spillq.Open(dir, spillq.Options{}); !errors.Is(err, diskqueue.ErrLocked) {
		t.Fatalf("second Open: got %v, want ErrLocked", err)
	}
	if _, err := spillq.Open(t.TempDir(), spillq.Options{MemQueueSize: -1}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("bad options: %v", err)
	}
}

// TestReplay re-enqueues a retained range as fresh messages, for
// reprocessing after a bug fix.
func TestReplay(t *testing.T) {
	q := open(t, t.TempDir(), spillq.Options{Disk: diskqueue.Options{RetainBytes: 1 << 20}})
	defer q.Close()
	ctx := context.Background()
	var ids []channel.ID
	for i := 0; i < 10; i++ {
		q.Put(ctx, body(i))
	}
	for i := 0; i < 10; i++ {
		m := recv(t, q)
		ids = append(ids, m.ID)
		m.Finish()
	}
	n, err := q.Replay(ctx, 3, 7)
	if err != nil || n != 4 {
		t.Fatalf("Replay: %d, %v", n, err)
	}
	for i := 3; i < 7; i++ {
		m := recv(t, q)
		if index(t, m) != i || m.Attempts != 1 || m.ID == ids[i] {
			t.Fatalf("replayed %q attempt %d id %s (was %s)", m.Body, m.Attempts, m.ID, ids[i])
		}
		m.Finish()
	}
	// Without retention the range is gone, and the error says so.
	q2 := open(t, t.TempDir(), spillq.Options{Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}})
	defer q2.Close()
	for i := 0; i < 100; i++ {
		q2.Put(ctx, body(i))
	}
	for i := 0; i < 100; i++ {
		recv(t, q2).Finish()
	}
	q2.Disk().Sync(ctx)
	if _, err := q2.Replay(ctx, 0, 10); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Fatalf("Replay of deleted records: %v", err)
	}
	c, _ := channel.New(channel.Options{MemQueueSize: 1})
	defer c.Close()
	if _, err := c.Replay(ctx, 0, 1); !errors.Is(err, channel.ErrNoReplay) {
		t.Fatalf("Replay without a replaying backend: %v", err)
	}
}

func TestMain(m *testing.M) {
	// TestKillChild runs as a subprocess that is killed, not left to exit.
	if os.Getenv("SPILLQ_KILL_DIR") != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
