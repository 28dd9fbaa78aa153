package spillq_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/crashtest"
)

// Tests of deferral through the timer store (channel.Options.Timers).

// soonDelay is the deferral TestDeferredSIGKILL expects back after the
// kill.
const soonDelay = 1500 * time.Millisecond

// TestDeferredKillChild is the process TestDeferredSIGKILL kills: the
// workload of TestDeferredDoesNotPinTheLog, plus a message deferred
// briefly, under the same 1 MiB budget.
func TestDeferredKillChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok || os.Getenv("SPILLQ_DEFER_CHILD") != "pin" {
		t.Skip("run by TestDeferredSIGKILL")
	}
	q, err := spillq.Open(dir, spillq.Options{Disk: diskqueue.Options{MaxSegmentBytes: 64 << 10, MaxDiskBytes: 1 << 20}})
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	for _, d := range []struct {
		body  string
		delay time.Duration
	}{{"hour", time.Hour}, {"soon", soonDelay}} {
		if err := q.PutWith(ctx, []byte(d.body), channel.PutOptions{Delay: d.delay}); err != nil {
			crashtest.Report("put-error", err)
			select {}
		}
	}
	for i := 0; ; i++ {
		if err := q.Put(ctx, body(i)); err != nil {
			crashtest.Report("put-error", strings.ReplaceAll(err.Error(), " ", "_"))
			select {}
		}
		crashtest.Report("put", i)
		m, err := q.Receive(ctx)
		for err == nil && !strings.HasPrefix(string(m.Body), "job-") {
			crashtest.Report("held", string(m.Body)) // the soon one, due before the kill: left unfinished
			m, err = q.Receive(ctx)
		}
		if err != nil {
			crashtest.Report("receive-error", err)
			select {}
		}
		crashtest.Report("fin", i)
		if m.Finish() == nil {
			crashtest.Report("done", i)
		}
	}
}

// TestDeferredSIGKILL is the test with a kill: one message
// deferred an hour (and one briefly), then messages put and finished one
// by one under a 1 MiB disk budget until a SIGKILL. No Put fails, the main
// log holds about one segment, nothing finished comes back, and the brief
// deferral does come back, not before it is due, while the hour's waits.
func TestDeferredSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a subprocess")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	res := crashtest.Start(t, crashtest.Run{
		Test: "TestDeferredKillChild", Dir: dir, Env: []string{"SPILLQ_DEFER_CHILD=pin"},
		KillAfter: 2000 + rng.IntN(18000), KillKind: "done",
	})
	if e := res.Events["put-error"]; len(e) > 0 {
		t.Fatalf("a Put failed under the 1 MiB budget: %v", e)
	}
	puts, fins, done := res.Set("put"), res.Set("fin"), res.Set("done")
	q := open(t, dir, spillq.Options{Disk: diskqueue.Options{MaxSegmentBytes: 64 << 10, MaxDiskBytes: 1 << 20}})
	defer q.Close()
	if err := spillq.SyncDisk(context.Background(), q); err != nil { // a writer round: deletions done
		t.Fatal(err)
	}
	if st := q.Disk().Stats(); st.Segments > 2 || st.Depth > 1 {
		t.Fatalf("after %d messages finished behind a deferred one: the main log holds %d segments, %d records", len(done), st.Segments, st.Depth)
	}
	if d := q.Timers().Depth(); d != 2 {
		t.Fatalf("timer store holds %d records, want the 2 deferred", d)
	}
	delivered := map[string]bool{}
	for !delivered["soon"] || q.Depth() > 0 {
		m := recv(t, q)
		k := string(m.Body)
		if strings.HasPrefix(k, "job-") {
			k = strconv.Itoa(index(t, m))
			if done[k] {
				t.Fatalf("message %s was finished before the kill and is delivered again", k)
			}
		}
		if k == "hour" {
			t.Fatal("the message deferred an hour is delivered")
		}
		if k == "soon" && time.Now().Before(m.Timestamp.Add(soonDelay)) {
			t.Fatalf("the deferred message is delivered %v before it is due", time.Until(m.Timestamp.Add(soonDelay)))
		}
		if delivered[k] {
			t.Fatalf("%s delivered twice after the restart", k)
		}
		delivered[k] = true
		m.Finish()
	}
	for k := range puts {
		if !delivered[k] && !fins[k] {
			t.Fatalf("message %s was put and is lost", k)
		}
	}
	if st := q.Stats(); st.Deferred != 1 {
		t.Fatalf("after the restart %d deferred, want the hour's", st.Deferred)
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if m, err := q.Receive(short); err == nil {
		t.Fatalf("delivered %q, want nothing more", m.Body)
	}
	t.Logf("killed after %d finished; %d delivered after the restart", len(done), len(delivered))
}

// TestKillDeferChild is the process TestSIGKILLDeferred kills: producers
// put messages, half with a delay; the consumer finishes some, requeues
// some with a delay and abandons a few, with few timers held in memory so
// the timer store is read through again and again.
func TestKillDeferChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok || os.Getenv("SPILLQ_DEFER_CHILD") != "many" {
		t.Skip("run by TestSIGKILLDeferred")
	}
	start, _ := strconv.Atoi(os.Getenv("SPILLQ_KILL_START"))
	q, err := spillq.Open(dir, spillq.Options{MaxDeferredInMemory: 16, Disk: diskqueue.Options{SyncEvery: 1, MaxSegmentBytes: 16 << 10}})
	if err != nil {
		crashtest.Report("open-error", err)
		select {}
	}
	ctx := context.Background()
	for p := 0; p < 2; p++ {
		go func() {
			for i := start + p; ; i += 2 {
				var po channel.PutOptions
				if rand.IntN(2) == 0 {
					po.Delay = time.Duration(1+rand.IntN(200)) * time.Millisecond
				}
				if err := q.PutWith(ctx, body(i), po); err != nil {
					crashtest.Report("put-error", err)
					return
				}
				crashtest.Report("put", i)
			}
		}()
	}
	for c := 0; c < 2; c++ {
		go func() {
			for {
				m, err := q.Receive(ctx)
				if err != nil {
					return
				}
				i, _ := strconv.Atoi(strings.TrimPrefix(string(m.Body), "job-"))
				switch r := rand.IntN(20); {
				case r == 0:
					crashtest.Report("abandon", i) // in flight at the kill
				case r < 9:
					m.Requeue(time.Duration(1+rand.IntN(100)) * time.Millisecond)
				default:
					crashtest.Report("fin", i)
					if m.Finish() == nil {
						crashtest.Report("done", i) // must never come back
					}
				}
			}
		}()
	}
	select {}
}

// TestSIGKILLDeferred kills a process that defers and requeues with delays
// at random moments: after a restart every message put comes back (or was
// finished) once due, and none finished comes back.
func TestSIGKILLDeferred(t *testing.T) {
	cycles := killCycles(t, 3)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	dir := t.TempDir()
	var totalPuts, totalDelivered int
	for cycle := 0; cycle < cycles; cycle++ {
		res := crashtest.Start(t, crashtest.Run{
			Test: "TestKillDeferChild", Dir: dir,
			Env:       []string{"SPILLQ_DEFER_CHILD=many", "SPILLQ_KILL_START=" + strconv.Itoa(cycle*1_000_000)},
			KillAfter: 200 + rng.IntN(2000), KillKind: "put",
		})
		puts, fins, done := res.Set("put"), res.Set("fin"), res.Set("done")
		if n := len(res.Events["done"]); n != len(done) {
			t.Fatalf("cycle %d: %d messages finished twice before the kill, with no crash in between", cycle, n-len(done))
		}
		q := open(t, dir, spillq.Options{MaxDeferredInMemory: 16})
		delivered := map[string]bool{}
		for {
			st := q.Stats()
			if q.Depth() == 0 && st.Deferred == 0 && st.InFlight == 0 {
				break
			}
			m := recv(t, q)
			k := strconv.Itoa(index(t, m))
			if done[k] {
				t.Fatalf("cycle %d: message %s was finished before the kill and is delivered again", cycle, k)
			}
			if due := m.Timestamp; time.Now().Before(due) {
				t.Fatalf("cycle %d: message %s delivered before it was put", cycle, k)
			}
			delivered[k] = true
			m.Finish()
		}
		lost := 0
		for k := range puts {
			if !delivered[k] && !fins[k] {
				lost++
			}
		}
		if lost > 0 {
			t.Fatalf("cycle %d: %d of %d acknowledged puts lost", cycle, lost, len(puts))
		}
		if d, td := q.Disk().Depth(), q.Timers().Depth(); d != 0 || td != 0 {
			t.Fatalf("cycle %d: drained, yet the main log holds %d records and the timer store %d", cycle, d, td)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		totalPuts += len(puts)
		totalDelivered += len(delivered)
	}
	t.Logf("%d kills, %d acknowledged puts, %d delivered after the restarts, 0 lost, 0 finished delivered again", cycles, totalPuts, totalDelivered)
}

// TestDeferredHeapBound: many more deferred messages than the channel may
// track in memory. The bound holds throughout, every message is delivered,
// none before it is due, in due order, requeued ones again after their new
// delay, and the timer store is read through again as the ones in memory
// are used up.
func TestDeferredHeapBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound, n = 64, 1500
		q := open(t, t.TempDir(), spillq.Options{MaxDeferredInMemory: bound})
		defer q.Close()
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		delay := make([]time.Duration, n)
		check := func() {
			t.Helper()
			if ts := spillq.TimerStats(q); ts.InMemory > bound || ts.Fallback != 0 {
				t.Fatalf("%d timers in memory, bound %d; %d deferred held whole", ts.InMemory, bound, ts.Fallback)
			}
		}
		for i := 0; i < n; i++ {
			delay[i] = time.Duration(1+rng.IntN(3600)) * time.Second
			if err := q.PutWith(ctx, body(i), channel.PutOptions{Delay: delay[i]}); err != nil {
				t.Fatal(err)
			}
			check()
		}
		if st := q.Stats(); st.Deferred != n {
			t.Fatalf("%d deferred, want %d", st.Deferred, n)
		}
		due := map[int]time.Time{}
		var last time.Time
		seen := map[int]int{}
		requeued := 0
		for delivered := 0; delivered < n+requeued; delivered++ {
			wait, cancel := context.WithTimeout(ctx, 2*time.Hour) // virtual time
			m, err := q.Receive(wait)
			cancel()
			if err != nil {
				t.Fatalf("after %d delivered: %v; %+v", delivered, err, spillq.TimerStats(q))
			}
			i := index(t, m)
			d, ok := due[i]
			if !ok {
				d = m.Timestamp.Add(delay[i])
			}
			now := time.Now()
			if now.Before(d) {
				t.Fatalf("message %d delivered %v before it is due", i, d.Sub(now))
			}
			if d.Before(last) {
				t.Fatalf("message %d, due %v, delivered after one due %v later", i, d, last.Sub(d))
			}
			last = d
			seen[i]++
			check()
			if seen[i] == 1 && i%10 == 0 {
				// Deferred again, from the timer store: a new record
				// there, the old one acknowledged.
				again := time.Duration(1+rng.IntN(600)) * time.Second
				due[i] = time.Now().Add(again)
				requeued++
				if err := m.Requeue(again); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < n; i++ {
			if want := 1 + map[bool]int{true: 1}[i%10 == 0]; seen[i] != want {
				t.Fatalf("message %d delivered %d times, want %d", i, seen[i], want)
			}
		}
		ts := spillq.TimerStats(q)
		if ts.Refills < n/bound {
			t.Fatalf("the timer store was read through %d times for %d messages, %d in memory at a time", ts.Refills, n, bound)
		}
		synctest.Wait()
		if st, td := q.Stats(), q.Timers().Depth(); st.Deferred != 0 || td != 0 {
			t.Fatalf("all delivered, yet %d deferred and %d records in the timer store", st.Deferred, td)
		}
		t.Logf("%d deferred (%d requeued with a delay), %d in memory at most: %d reads of the timer store, %d records read", n, requeued, bound, ts.Refills, ts.Scanned)
	})
}

// putBacklogThenDeferred puts backlog messages, then deferred more an
// hour ahead, behind them in the log.
func putBacklogThenDeferred(t *testing.T, q *spillq.Queue, backlog, deferred int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < backlog; i++ {
		if err := q.Put(ctx, body(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < deferred; i++ {
		if err := q.PutWith(ctx, body(backlog+i), channel.PutOptions{Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestartDoesNotReadTheBacklog: a restart with a large backlog and a
// few deferred messages finds the deferred ones by reading the timer store,
// which holds only them, and does not read the backlog to count them.
func TestRestartDoesNotReadTheBacklog(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{})
	const backlog, deferred = 20000, 5
	putBacklogThenDeferred(t, q, backlog, deferred)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, spillq.Options{})
	defer q.Close()
	for spillq.TimerStats(q).Refills == 0 {
		time.Sleep(time.Millisecond) // the read of the timer store at Open
	}
	if ts := spillq.TimerStats(q); ts.Scanned != deferred || ts.InMemory != deferred {
		t.Fatalf("the restart read %d records to find %d deferred (%d in memory)", ts.Scanned, deferred, ts.InMemory)
	}
	if st := q.Stats(); st.Deferred != deferred || st.DiskDepth != backlog {
		t.Fatalf("Deferred %d, DiskDepth %d; want %d and %d", st.Deferred, st.DiskDepth, deferred, backlog)
	}
	// Handed out by the log: the pump's read-ahead, not the backlog.
	if ds := q.Disk().Stats(); ds.InFlight > 256 {
		t.Fatalf("%d records of the backlog read at the restart", ds.InFlight)
	}
}

// dueEnvelope is a channel message envelope with a due time, as a channel
// without a timer store wrote it to the main log (FORMAT.md: flag bit 0,
// the due time after the put time).
func dueEnvelope(id channel.ID, due time.Time, body string) []byte {
	b := channel.MarshalMessage(id, time.Now(), nil)
	b[1] |= 1
	b = binary.BigEndian.AppendUint64(b, uint64(due.UnixNano()))
	return append(b, body...)
}

// TestDeferredInTheLogFromBefore: a queue written before the timer store,
// with deferred records in its main log, still delivers them when due;
// read back, they move to the timer store and leave the log.
func TestDeferredInTheLogFromBefore(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	dq, err := diskqueue.Open(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dq.Put(ctx, channel.MarshalMessage(1, time.Now(), []byte("plain")))
	dq.Put(ctx, dueEnvelope(2, time.Now().Add(time.Hour), "hour"))
	dq.Put(ctx, dueEnvelope(3, time.Now().Add(300*time.Millisecond), "soon"))
	dq.Put(ctx, channel.MarshalMessage(4, time.Now(), []byte("plain")))
	if err := dq.Close(); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	q := open(t, dir, spillq.Options{Logger: newTestLogger(&logs, &mu)})
	for _, want := range []string{"plain", "plain", "soon"} {
		m := recv(t, q)
		if string(m.Body) != want {
			t.Fatalf("got %q, want %q", m.Body, want)
		}
		m.Finish()
	}
	if d, td, st := q.Disk().Depth(), q.Timers().Depth(), q.Stats(); d != 0 || td != 1 || st.Deferred != 1 {
		t.Fatalf("main log %d records, timer store %d, %d deferred; want 0, 1, 1", d, td, st.Deferred)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, spillq.Options{Logger: newTestLogger(&logs, &mu)})
	defer q.Close()
	if st := q.Stats(); st.Deferred != 1 || q.Depth() != 0 {
		t.Fatalf("after a restart: %d deferred, depth %d; want 1 and 0", st.Deferred, q.Depth())
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "unknown files") {
		t.Fatalf("the timer store's directory is reported as unknown:\n%s", logs.String())
	}
}

// lockedWriter serialises writes to a strings.Builder.
type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func newTestLogger(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{b, mu}, nil))
}
