package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/vfs"
)

func mustOpen(t testing.TB, dir string, opts Options) *Queue {
	t.Helper()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func TestDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{})
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: got %v, want ErrLocked", err)
	}
	q.Close()
	q = mustOpen(t, dir, Options{})
	q.Close()
}

func TestOptionsValidation(t *testing.T) {
	bad := []Options{
		{MaxSegmentBytes: 10},
		{MaxSegmentBytes: 1 << 33},
		{MaxRecordBytes: -1},
		{MinRecordBytes: 100, MaxRecordBytes: 10},
		{SyncEvery: -1},
		{SyncInterval: -time.Second},
		{MaxDiskBytes: -1},
		{MaxDiskBytes: 10},
		{MaxDiskBytes: minDiskBytes(0) - 1}, // no room for an empty record beside an empty log
		{MaxDiskBytes: minDiskBytes(64) - 1, MinRecordBytes: 64},
		{RetainBytes: -1},
		{RetainAge: -time.Hour},
	}
	for _, o := range bad {
		if _, err := Open(t.TempDir(), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Open(%+v): got %v, want ErrInvalidOptions", o, err)
		}
	}
	// The smallest budget takes the smallest record.
	tight := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: minDiskBytes(0)})
	if err := tight.Put(context.Background(), nil); err != nil {
		t.Errorf("Put of an empty record at MaxDiskBytes %d: %v", minDiskBytes(0), err)
	}
	tight.Close()
	o := Options{SyncEvery: 7}
	q := mustOpen(t, t.TempDir(), o)
	defer q.Close()
	if o.MaxSegmentBytes != 0 {
		t.Fatal("Open wrote into the caller's Options")
	}
}

func TestOpenOnAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, []byte("x"), 0o644)
	if _, err := Open(f, Options{}); err == nil {
		t.Fatal("Open on a regular file succeeded")
	}
}

func TestRecordLimits(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{MinRecordBytes: 2, MaxRecordBytes: 10})
	defer q.Close()
	ctx := context.Background()
	if err := q.Put(ctx, make([]byte, 11)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("got %v, want ErrRecordTooLarge", err)
	}
	if err := q.Put(ctx, []byte("x")); !errors.Is(err, ErrRecordTooSmall) {
		t.Fatalf("got %v, want ErrRecordTooSmall", err)
	}
	if err := q.Put(ctx, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if q.Depth() != 1 {
		t.Fatalf("rejected records counted: Depth %d", q.Depth())
	}
}

func TestEmptyBodies(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{})
	defer q.Close()
	for _, b := range [][]byte{nil, {}} {
		if err := q.Put(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, q)
	if len(got) != 2 || len(got[0]) != 0 || len(got[1]) != 0 {
		t.Fatalf("got %q", got)
	}
}

func TestUseAfterClose(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{})
	var wg sync.WaitGroup
	readErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := q.Read(context.Background())
		readErr <- err
	}()
	// Close twice, concurrently: one wins, the other says ErrClosed.
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- q.Close() }()
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, ErrClosed) || errors.Is(e2, ErrClosed)) {
		t.Fatalf("concurrent Close: got %v and %v, want nil and ErrClosed", e1, e2)
	}
	wg.Wait()
	if err := <-readErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Read: got %v, want ErrClosed", err)
	}
	ctx := context.Background()
	if err := q.Put(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put: got %v", err)
	}
	if _, err := q.Read(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read: got %v", err)
	}
	if err := q.Sync(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync: got %v", err)
	}
	if err := q.Empty(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Empty: got %v", err)
	}
	if _, err := q.ReadAt(0); err == nil {
		t.Fatal("ReadAt after Close succeeded")
	}
}

// TestDiskBudget: at MaxDiskBytes Put fails with ErrDiskFull, and works
// again as soon as a consumer frees space, with no reset.
func TestDiskBudget(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: 8 << 10, MaxSegmentBytes: 2 << 10})
	defer q.Close()
	ctx := context.Background()
	n := 0
	var err error
	for ; n < 10000; n++ {
		if err = q.Put(ctx, faultBody(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Put past the budget: got %v after %d records, want ErrDiskFull", err, n)
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if used := q.Stats().DiskBytes; used > 8<<10 {
		t.Fatalf("DiskBytes %d over the budget", used)
	}
	got := readAll(t, q) // consumes everything: segments go
	if len(got) != n {
		t.Fatalf("read %d, put %d", len(got), n)
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Segments may fall differently the second time, costing headers, so
	// not quite all of the first fill need fit again; half surely does
	// (TestDiskBudgetFreedAtOnce asks more).
	for i := 0; i < n/2; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatalf("Put %d after consumers freed space: %v", i, err)
		}
	}
}

// TestDiskBudgetFreedAtOnce: once a consumer has acknowledged everything,
// the next Put at MaxDiskBytes succeeds, with no Sync or wait between (it
// failed for a few milliseconds, until the writer's next round deleted the
// acknowledged segments and rolled the consumed active one), and about as
// much as the first fill fits again, with the default segment size and
// small segments alike.
func TestDiskBudgetFreedAtOnce(t *testing.T) {
	for _, seg := range []int64{0, 2 << 10} {
		t.Run(fmt.Sprintf("MaxSegmentBytes=%d", seg), func(t *testing.T) {
			q := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: 16 << 10, MaxSegmentBytes: seg})
			defer q.Close()
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			// fill puts until the budget refuses one; consume reads and
			// acknowledges n records.
			fill := func(limit int) (int, error) {
				n := 0
				for ; n < limit; n++ {
					if err := q.Put(ctx, faultBody(n)); err != nil {
						return n, err
					}
				}
				return n, nil
			}
			consume := func(round, n int) {
				for i := 0; i < n; i++ {
					rec, err := q.Read(done)
					if err != nil {
						t.Fatalf("round %d: Read %d of %d: %v", round, i, n, err)
					}
					if err := q.Ack(rec.Seq); err != nil {
						t.Fatal(err)
					}
				}
			}
			for round := 0; round < 3; round++ {
				n, err := fill(10000)
				if !errors.Is(err, ErrDiskFull) || n < 10 {
					t.Fatalf("round %d: Put past the budget: got %v after %d records, want ErrDiskFull", round, err, n)
				}
				consume(round, n)
				// As much fits again as the first time, give or take a
				// segment's headers where the segments fall differently.
				m, err := fill(n)
				if m < n*3/4 {
					t.Fatalf("round %d: right after every record was acknowledged %d Puts of %d succeeded, then: %v", round, m, n, err)
				}
				consume(round, m)
			}
		})
	}
}

// TestDiskBudgetOutranksRetention: segments every consumer has
// acknowledged that RetainBytes or RetainAge keep give way to new records
// at MaxDiskBytes the moment a Put needs the room, not at the writer's next
// round: a consumer that keeps up never sees ErrDiskFull (it saw it on 9
// Puts in 10 before), and the newest retained records stay readable.
func TestDiskBudgetOutranksRetention(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"RetainBytes", Options{RetainBytes: 1 << 30}},
		{"RetainAge", Options{RetainAge: time.Hour}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.MaxDiskBytes, opts.MaxSegmentBytes = 64<<10, 4<<10
			q := mustOpen(t, t.TempDir(), opts)
			defer q.Close()
			ctx := context.Background()
			const n = 5000 // about 8 times the budget
			for i := range n {
				if err := q.Put(ctx, faultBody(i)); err != nil {
					t.Fatalf("Put %d, everything before it acknowledged: %v", i, err)
				}
				rec, err := q.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := q.Ack(rec.Seq); err != nil {
					t.Fatal(err)
				}
			}
			if used := q.Stats().DiskBytes; used > opts.MaxDiskBytes {
				t.Fatalf("DiskBytes %d over the budget %d", used, opts.MaxDiskBytes)
			}
			st := q.Stats()
			if st.FirstSeq >= n-100 {
				t.Fatalf("FirstSeq %d: retention kept almost nothing of %d records", st.FirstSeq, n)
			}
			rec, err := q.ReadAt(st.FirstSeq)
			if err != nil || !bytes.Equal(rec.Body, faultBody(int(st.FirstSeq))) {
				t.Fatalf("ReadAt(%d) of a retained record: %v", st.FirstSeq, err)
			}
		})
	}
}

// TestDiskBudgetKeepsTheHold: at MaxDiskBytes a Put does not delete the
// acknowledged segments HoldFrom keeps (a restart rebuilds its holder's
// state from them: deleting them lost keys after a SIGKILL); it fails,
// tells the holder through HoldPressure, and once the hold moves the next
// Put finds room.
func TestDiskBudgetKeepsTheHold(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: 64 << 10, MaxSegmentBytes: 4 << 10})
	defer q.Close()
	q.HoldFrom(0)
	ctx := context.Background()
	var i int
	var err error
	for ; i < 10000; i++ {
		if err = q.Put(ctx, faultBody(i)); err != nil {
			break
		}
		rec, rerr := q.Read(ctx)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err := q.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Put %d with every record acknowledged and held: %v, want ErrDiskFull", i, err)
	}
	if st := q.Stats(); st.FirstSeq != 0 {
		t.Fatalf("FirstSeq %d: held records were deleted", st.FirstSeq)
	}
	select {
	case <-q.HoldPressure():
	default:
		t.Fatal("a Put at the budget with held acknowledged segments did not tell the holder")
	}
	q.HoldFrom(q.NextSeq())
	if err := q.Put(ctx, faultBody(i)); err != nil {
		t.Fatalf("Put after the hold moved: %v", err)
	}
	if st := q.Stats(); st.FirstSeq == 0 {
		t.Fatal("no segment went once the hold moved")
	}
}

// TestDiskBudgetPutDoesNotWaitForWriter: a Put at MaxDiskBytes returns
// while the writer goroutine is stuck (in a long fsync, say): at once when
// nothing could make room (no retention, no hold, no drop-when-full
// cursor), and when its context ends otherwise (it asked the writer to
// make room, which waits for the writer's turn). It waited for the writer,
// whatever its deadline, when any retention or hold was set.
func TestDiskBudgetPutDoesNotWaitForWriter(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		hold bool
		ack  bool // acknowledge what is read: the writer keeps acknowledged segments
	}{
		{"plain", Options{}, false, false},
		{"HoldFrom", Options{}, true, false},
		{"RetainBytes", Options{RetainBytes: 1 << 30}, false, false},
		{"HoldFrom/acknowledged", Options{}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.MaxDiskBytes, opts.MaxSegmentBytes = 64<<10, 4<<10
			q := mustOpen(t, t.TempDir(), opts)
			defer q.Close()
			if c.hold {
				q.HoldFrom(0)
			}
			ctx := context.Background()
			var i int
			for ; ; i++ {
				err := q.Put(ctx, faultBody(i))
				if errors.Is(err, ErrDiskFull) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if c.ack {
					rec, err := q.Read(ctx)
					if err != nil {
						t.Fatal(err)
					}
					q.Ack(rec.Seq)
				}
			}
			// The writer goroutine busy until the gate opens.
			gate, busy := make(chan struct{}), make(chan struct{})
			var open sync.Once
			defer open.Do(func() { close(gate) })
			stuck := make(chan error, 1)
			go func() {
				stuck <- q.request(func() error { close(busy); <-gate; return nil })
			}()
			<-busy
			pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			put := make(chan error, 1)
			go func() { put <- q.Put(pctx, faultBody(i)) }()
			var err error
			select {
			case err = <-put:
			case <-time.After(10 * time.Second): // not a speed: the Put hangs
				open.Do(func() { close(gate) })
				t.Fatalf("Put at the budget returned only once the writer was free: %v", <-put)
			}
			select {
			case <-stuck:
				t.Fatal("the writer's turn ended before the gate opened")
			default:
			}
			open.Do(func() { close(gate) })
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("Put at the budget: %v, want ErrDiskFull", err)
			}
			if err := <-stuck; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDiskBudgetBlocks: with BlockWhenFull, Put waits until a consumer
// frees space, or until its context ends, and then says both why it
// waited and why it stopped.
func TestDiskBudgetBlocks(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: 4 << 10, MaxSegmentBytes: 1 << 10, BlockWhenFull: true})
	defer q.Close()
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	n := 0
	var err error
	for ; n < 10000; n++ {
		if err = q.Put(short, faultBody(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrDiskFull) {
		t.Fatalf("blocked Put: got %v, want its context's error and ErrDiskFull", err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Put(ctx, []byte("waits for space")) }()
	readAll(t, q)
	if err := <-done; err != nil {
		t.Fatalf("Put after space freed: %v", err)
	}
}

// TestRealDiskFull fills a 1 MiB tmpfs: Put fails with ErrDiskFull wrapping
// ENOSPC, nothing accepted is lost, and Put works again once space is
// freed. It needs mount(2), so it runs as root, as CI does.
func TestRealDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, "the injected-ENOSPC tests cover the same paths")
	q := mustOpen(t, filepath.Join(mnt, "q"), Options{MaxSegmentBytes: 64 << 10, SyncEvery: 1})
	defer q.Close()
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), 1000)
	accepted := fillTmpfs(t, q, body)
	// Consume everything accepted: segments are deleted, space returns.
	got := 0
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for got < accepted {
		rec, err := q.Read(rctx)
		if err != nil {
			t.Fatalf("Read %d of %d: %v", got, accepted, err)
		}
		q.Ack(rec.Seq)
		got++
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatalf("Sync after freeing space: %v", err)
	}
	for i := 0; i < 100; i++ {
		if err := q.Put(ctx, body); err != nil {
			t.Fatalf("Put %d after space was freed: %v", i, err)
		}
	}
}

// fillTmpfs puts body until the file system is full, checks that the Put
// that did not fit failed with ErrDiskFull wrapping ENOSPC, and returns how
// many were accepted.
func fillTmpfs(t *testing.T, q *Queue, body []byte) int {
	t.Helper()
	accepted := 0
	var err error
	for ; accepted < 5000; accepted++ {
		if err = q.Put(context.Background(), body); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on a full tmpfs: got %v after %d records, want ErrDiskFull wrapping ENOSPC", err, accepted)
	}
	return accepted
}

// TestRealDiskFullDefaultSegments fills a 1 MiB tmpfs with the default
// 100 MiB segments, so everything sits in the one active segment: Put
// fails with ErrDiskFull before writing anything, nothing accepted is lost,
// and once consumers acknowledge everything Put works again (the writer
// frees the consumed active segment to roll it), in the same process and
// after a reopen.
func TestRealDiskFullDefaultSegments(t *testing.T) {
	mnt := mountTmpfs(t, "the injected-ENOSPC tests cover the same paths")
	dir := filepath.Join(mnt, "q")
	q := mustOpen(t, dir, Options{})
	ctx := context.Background()
	body := bytes.Repeat([]byte("y"), 1000)
	accepted := fillTmpfs(t, q, body)
	if st := q.Stats(); st.WriteSeq != uint64(accepted) || st.Segments != 1 {
		t.Fatalf("after the refused Put: WriteSeq %d Segments %d, want %d and 1", st.WriteSeq, st.Segments, accepted)
	}
	if got := len(readAll(t, q)); got != accepted {
		t.Fatalf("read %d of %d accepted", got, accepted)
	}
	// The first Put after the drain finds the disk full, asks the writer
	// to roll the consumed active segment and waits for that (it failed,
	// and so did the next few, until the writer came round: a docs-only
	// user trial).
	putAgain := func(stage string) {
		t.Helper()
		for i := 0; i < 50; i++ {
			if err := q.Put(ctx, body); err != nil {
				t.Fatalf("%s: Put %d: %v", stage, i, err)
			}
		}
	}
	putAgain("same process")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = mustOpen(t, dir, Options{})
	defer q.Close()
	if got := len(readAll(t, q)); got < 50 {
		t.Fatalf("after reopen read %d, want the 50+ put after the drain", got)
	}
	putAgain("after reopen")
}

// TestRetentionAndReplay keeps consumed segments for replay by seq and by
// time, bounded by bytes; the live cursor is not disturbed.
func TestRetentionAndReplay(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 1 << 10, RetainBytes: 6 << 10}
	q := mustOpen(t, dir, opts)
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	readAll(t, q)
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	if st.FirstSeq == 0 || st.FirstSeq >= 500 {
		t.Fatalf("FirstSeq %d: retention kept nothing or everything", st.FirstSeq)
	}
	if st.DiskBytes > 6<<10+2<<10 {
		t.Fatalf("DiskBytes %d well over RetainBytes", st.DiskBytes)
	}
	if _, err := q.ReadAt(st.FirstSeq - 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadAt before the retained range: got %v, want ErrNotFound", err)
	}
	n := 0
	for rec, err := range q.Scan(st.FirstSeq, 500) {
		if err != nil {
			t.Fatal(err)
		}
		if want := faultBody(int(st.FirstSeq) + n); !bytes.Equal(rec.Body, want) {
			t.Fatalf("Scan: got %q, want %q", rec.Body, want)
		}
		n++
	}
	if n != int(500-st.FirstSeq) {
		t.Fatalf("Scan returned %d records, want %d", n, 500-st.FirstSeq)
	}
	for _, err := range q.Scan(0, 10) {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Scan from a deleted seq: got %v, want ErrNotFound", err)
		}
	}
	if q.Depth() != 0 || q.Stats().ReadSeq != 500 {
		t.Fatalf("replay moved the live cursor: %+v", q.Stats())
	}
	// Reopen: the retained range survives.
	q.Close()
	q = mustOpen(t, dir, opts)
	defer q.Close()
	if got := q.Stats().FirstSeq; got != st.FirstSeq {
		t.Fatalf("FirstSeq after reopen: got %d, want %d", got, st.FirstSeq)
	}
}

func TestRetentionByAge(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	q := mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: 1 << 10, RetainAge: time.Hour, clockForTesting: clock})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Sync(ctx)
	readAll(t, q)
	q.Sync(ctx)
	// The records are stamped 2023; the writer's wall clock is now, so
	// every consumed segment is older than an hour and goes.
	if st := q.Stats(); st.Segments != 1 {
		t.Fatalf("Segments %d: age retention kept old segments", st.Segments)
	}
}

// TestSeekTime covers equal timestamps, a clock stepping backwards, and
// seeks before the first and after the last record.
func TestSeekTime(t *testing.T) {
	var mu sync.Mutex
	var stamps []int64
	i := 0
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		ts := stamps[i]
		i++
		return time.Unix(0, ts)
	}
	// 0..99: ten per second from t=1000s; then the clock steps back 5 s
	// for 50 records; then it goes forward again.
	for k := 0; k < 100; k++ {
		stamps = append(stamps, int64(1000+k/10)*1e9)
	}
	for k := 0; k < 50; k++ {
		stamps = append(stamps, int64(1005)*1e9-int64(k))
	}
	for k := 0; k < 100; k++ {
		stamps = append(stamps, int64(1010+k/10)*1e9)
	}
	q := mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: 2 << 10, clockForTesting: clock})
	defer q.Close()
	ctx := context.Background()
	for k := range stamps {
		if err := q.Put(ctx, faultBody(k)); err != nil {
			t.Fatal(err)
		}
	}
	q.Sync(ctx)
	if q.Stats().Segments < 3 {
		t.Fatal("test wants several segments")
	}
	// The answer is the first seq whose timestamp is >= target and all of
	// whose predecessors are older (Kafka's rule with a running maximum).
	want := func(target int64) (uint64, bool) {
		for k := range stamps {
			if stamps[k] >= target {
				return uint64(k), true
			}
		}
		return 0, false
	}
	targets := []int64{0, 999e9, 1000e9, 1000e9 + 1, 1003e9, 1004.5e9, 1005e9, 1009e9, 1010e9, 1019e9, 1020e9, 2000e9}
	for _, target := range targets {
		got, err := q.SeekTime(time.Unix(0, target))
		w, ok := want(target)
		if !ok {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("SeekTime(%d): got %d, %v; want ErrNotFound", target, got, err)
			}
			continue
		}
		if err != nil || got != w {
			t.Fatalf("SeekTime(%d): got %d, %v; want %d", target, got, err, w)
		}
	}
	// Equal timestamps: the first of the ten records stamped 1003 s.
	if got, _ := q.SeekTime(time.Unix(1003, 0)); got != 30 {
		t.Fatalf("equal timestamps: got %d, want 30", got)
	}
}

func TestCompression(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{Compress: true})
	ctx := context.Background()
	compressible := bytes.Repeat([]byte("spillq "), 1000)
	random := make([]byte, 1000)
	for i := range random {
		random[i] = byte(rand.IntN(256))
	}
	q.Put(ctx, compressible)
	q.Put(ctx, random)
	q.Close()
	// Reopen without compression: old compressed records read back, new
	// ones are stored plain.
	q = mustOpen(t, dir, Options{})
	defer q.Close()
	q.Put(ctx, compressible)
	q.Sync(ctx)
	got := readAll(t, q)
	if len(got) != 3 || !bytes.Equal(got[0], compressible) || !bytes.Equal(got[1], random) || !bytes.Equal(got[2], compressible) {
		t.Fatal("bodies differ after a mixed compressed/plain log")
	}
	if st := q.Stats(); st.DiskBytes > 3*16+2*1000+7000+500 {
		t.Fatalf("compressible record was not compressed: %d bytes on disk", st.DiskBytes)
	}
}

func TestEmpty(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 512})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Sync(ctx)
	rec, _ := q.Read(ctx)
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	if q.Depth() != 0 {
		t.Fatalf("Depth after Empty: %d", q.Depth())
	}
	if err := q.Ack(rec.Seq); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("Ack after Empty: got %v, want ErrNotInFlight", err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "0*.log")) // segments, not the spare
	if len(logs) != 1 {
		t.Fatalf("files after Empty: %v", logs)
	}
	q.Put(ctx, []byte("new"))
	q.Sync(ctx)
	if got := readAll(t, q); len(got) != 1 || string(got[0]) != "new" {
		t.Fatalf("after Empty got %q", got)
	}
}

// TestPropertyRandomOps runs random puts, reads, acks, reopenings and
// rotations with retention, then checks every retained seq reads back
// what was put and every deleted one says ErrNotFound.
func TestPropertyRandomOps(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("SPILLQ_SEED"), 10, 64); err == nil {
		seed = s // to run a failure's seed again
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 700, RetainBytes: 3000, NoSync: true}
	q := mustOpen(t, dir, opts)
	ctx := context.Background()
	var bodies [][]byte
	var inflight []uint64
	for step := 0; step < 3000; step++ {
		switch op := rng.IntN(10); {
		case op < 5:
			b := []byte(fmt.Sprintf("p%d-%s", len(bodies), bytes.Repeat([]byte{'z'}, rng.IntN(60))))
			if err := q.Put(ctx, b); err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, b)
		case op < 7:
			done, cancel := context.WithCancel(ctx)
			cancel()
			q.Sync(ctx)
			if rec, err := q.Read(done); err == nil {
				if !bytes.Equal(rec.Body, bodies[rec.Seq]) {
					t.Fatalf("Read seq %d: %q, want %q", rec.Seq, rec.Body, bodies[rec.Seq])
				}
				inflight = append(inflight, rec.Seq)
			}
		case op < 9 && len(inflight) > 0:
			k := rng.IntN(len(inflight))
			if err := q.Ack(inflight[k]); err != nil {
				t.Fatal(err)
			}
			inflight = append(inflight[:k], inflight[k+1:]...)
		case op == 9 && rng.IntN(20) == 0:
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q = mustOpen(t, dir, opts)
			inflight = nil
		}
	}
	q.Sync(ctx)
	first := q.Stats().FirstSeq
	for seq := range uint64(len(bodies)) {
		rec, err := q.ReadAt(seq)
		if seq < first {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted seq %d: got %v, want ErrNotFound", seq, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(rec.Body, bodies[seq]) {
			t.Fatalf("retained seq %d: got %q, %v; want %q", seq, rec.Body, err, bodies[seq])
		}
	}
	q.Close()
}

// TestUnwritableDirectory: Open on a read-only file system fails with the
// operating system's error, and OpenReadOnly still reads what is there.
// Root ignores permission bits, so the test mounts a read-only tmpfs.
func TestUnwritableDirectory(t *testing.T) {
	mnt := mountTmpfs(t, "root ignores permission bits, so only a read-only mount makes a directory unwritable")
	dir := filepath.Join(mnt, "q")
	q := mustOpen(t, dir, Options{})
	q.Put(context.Background(), []byte("kept"))
	q.Close()
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("Open on a read-only file system: got %v, want EROFS", err)
	}
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly on a read-only file system: %v", err)
	}
	defer ro.Close()
	if rec, err := ro.ReadAt(0); err != nil || string(rec.Body) != "kept" {
		t.Fatalf("ReadAt: %q, %v", rec.Body, err)
	}
}

// mountTmpfs mounts a 1 MiB tmpfs for the test and returns its path. It
// needs root (CI runs as root); elsewhere the test is skipped, saying why
// and what covers the same ground.
func mountTmpfs(t *testing.T, instead string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; " + instead)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs here (%v: %s); %s", err, out, instead)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	return mnt
}

// TestFileCutUnderneath: another process cutting a segment file short must
// not crash the process. A Put that faults on the mapped log gets an error
// (sticky: the queue can no longer trust its files); a read of the cut log
// reports the damage instead of panicking.
func TestFileCutUnderneath(t *testing.T) {
	dir := t.TempDir()
	// A small segment is preallocated whole at once, so nothing extends
	// the file again after the cut (which would turn it into a hole).
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 8 << 10})
	ctx := context.Background()
	if q.Stats().WritePath != "mmap" {
		t.Skip("the write(2) path has no mapping to fault on; TestWritePathFallback covers it")
	}
	for i := 0; i < 10; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Sync(ctx); err != nil { // a writer round: preallocation done
		t.Fatal(err)
	}
	log := filepath.Join(dir, segmentName(0, logSuffix))
	if err := os.Truncate(log, 0); err != nil {
		t.Fatal(err)
	}
	err := q.Put(ctx, []byte("into the cut file"))
	if !errors.Is(err, errFault) {
		t.Fatalf("Put into a log cut to zero: got %v, want the mapping fault as an error", err)
	}
	if err := q.Put(ctx, []byte("after")); !errors.Is(err, errFault) {
		t.Fatalf("Put after a fault: got %v, want the sticky fault", err)
	}
	// Reads fault on the mapping and go over to pread: the cut records are
	// reported, never served.
	done, cancel := context.WithCancel(ctx)
	cancel()
	for {
		rec, err := q.Read(done)
		if err != nil {
			break
		}
		t.Fatalf("Read served seq %d from a log cut to zero", rec.Seq)
	}
	q.Close()
}

// TestWritePathFallback: where segments cannot be mapped the producer's own
// write(2) keeps the same guarantee, and Stats says which path is in use.
func TestWritePathFallback(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{writePathForTesting: true, MaxSegmentBytes: 4 << 10})
	ctx := context.Background()
	if got := q.Stats().WritePath; got != "write" {
		t.Fatalf("WritePath %q, want write", got)
	}
	for i := 0; i < 300; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	// What Put returned for is in the kernel: another reader of the files
	// (a read-only view) sees every record without a Sync or Close.
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st := ro.Stats(); st.WriteSeq != 300 {
		t.Fatalf("read-only view sees WriteSeq %d, want 300", st.WriteSeq)
	}
	ro.Close()
	got := readAll(t, q)
	if len(got) != 300 {
		t.Fatalf("read %d of 300", len(got))
	}
	q.Close()
	q = mustOpen(t, dir, Options{})
	defer q.Close()
	if st := q.Stats(); st.Depth != 0 || st.WritePath != "mmap" {
		t.Fatalf("reopened on the mapped path: %+v", st)
	}
}

// TestEmptyRacesProducers: Put rolls segments itself, so Empty must delete
// only what came before the segment it rolled to. Producers roll two more
// segments inside Empty's window here: what they put survives, and the
// queue stays usable.
func TestEmptyRacesProducers(t *testing.T) {
	ctx := context.Background()
	body := bytes.Repeat([]byte("e"), 1000)
	var q *Queue
	opts := Options{MaxSegmentBytes: 4096}
	opts.emptyHookForTesting = func() {
		for i := 0; i < 10; i++ { // four to a segment
			if err := q.Put(ctx, body); err != nil {
				t.Errorf("Put inside Empty: %v", err)
			}
		}
	}
	q = mustOpen(t, t.TempDir(), opts)
	defer q.Close()
	for i := 0; i < 3; i++ {
		q.Put(ctx, body)
	}
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, []byte("after")); err != nil {
		t.Fatalf("Put after Empty: %v", err)
	}
	if err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, q)
	if len(got) != 11 || string(got[10]) != "after" {
		t.Fatalf("after Empty: read %d records, want the 10 put inside it and 1 after", len(got))
	}
}

// TestTimeIndexAcrossManyReopens: every Close seals the active segment's
// time index with one more entry and the next Open appends to it again;
// the segment must roll before its mapped time index is full, not fail.
func TestTimeIndexAcrossManyReopens(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: 64 << 10, MaxRecordBytes: 1000}
	ctx := context.Background()
	n := 0
	for cycle := 0; cycle < 40; cycle++ {
		q := mustOpen(t, dir, opts)
		for i := 0; i < 10; i++ {
			if err := q.Put(ctx, faultBody(n)); err != nil {
				t.Fatalf("cycle %d Put %d: %v", cycle, n, err)
			}
			n++
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	q := mustOpen(t, dir, opts)
	defer q.Close()
	for i := 0; i < 3000; i++ {
		if err := q.Put(ctx, bytes.Repeat([]byte("t"), 900)); err != nil {
			t.Fatalf("Put %d after 40 reopens: %v", i, err)
		}
	}
}

// TestBlockWhenFullOnlyWhenFull: with BlockWhenFull, Puts that fit the
// budget never wait, however many run at once (the old write buffer
// counted bytes twice for a moment, and a waiter woke only on deletions).
func TestBlockWhenFullOnlyWhenFull(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 100)
	frame := int64(frameSize(len(body)) + indexEntrySize + 1)
	q := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: 2000 * frame, MaxSegmentBytes: 64 << 10, BlockWhenFull: true})
	defer q.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				if err := q.Put(ctx, body); err != nil {
					t.Errorf("Put %d of 1,200 that fit: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := q.Stats(); st.RetriedWrites != 0 {
		t.Fatalf("%d Puts waited for space although every one fitted (%d of %d bytes used)", st.RetriedWrites, st.DiskBytes, 2000*frame)
	}
}

// TestRecordsOverTheOpenersLimit: MaxRecordBytes is not in the files, so a
// log opened with a smaller limit than it was written under (a tool with
// the defaults; a spillq queue's records are its bodies in envelopes,
// larger than the body limit) must still read, look up, scan and verify
// every record. It did not: readers took a length over
// max(MaxRecordBytes, 1 MiB) for damage, and a tool draining such a queue
// dropped the record as damaged.
func TestRecordsOverTheOpenersLimit(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	big := bytes.Repeat([]byte("b"), DefaultMaxRecordBytes+100)
	bodies := [][]byte{[]byte("small before"), big, []byte("small after")}
	q := mustOpen(t, dir, Options{MaxRecordBytes: 2 * DefaultMaxRecordBytes})
	for _, b := range bodies {
		if err := q.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("Verify: %v, problems %v", err, rep.Problems)
	}
	for _, readOnly := range []bool{true, false} {
		var q *Queue
		if readOnly {
			q, err = OpenReadOnly(dir, Options{})
		} else {
			q, err = Open(dir, Options{})
		}
		if err != nil {
			t.Fatal(err)
		}
		rec, err := q.ReadAt(1)
		if err != nil || !bytes.Equal(rec.Body, big) {
			t.Fatalf("readOnly %v: ReadAt(1): %d bytes, %v", readOnly, len(rec.Body), err)
		}
		n := 0
		for rec, err := range q.Scan(0, 3) {
			if err != nil || !bytes.Equal(rec.Body, bodies[n]) {
				t.Fatalf("readOnly %v: Scan record %d: %d bytes, %v", readOnly, n, len(rec.Body), err)
			}
			n++
		}
		if !readOnly {
			for i, want := range bodies {
				rec, err := q.Read(ctx)
				if err != nil || !bytes.Equal(rec.Body, want) {
					t.Fatalf("Read %d: %d bytes, %v", i, len(rec.Body), err)
				}
				if err := q.Ack(rec.Seq); err != nil {
					t.Fatal(err)
				}
			}
			if st := q.Stats(); st.CorruptRecords != 0 {
				t.Fatalf("CorruptRecords %d", st.CorruptRecords)
			}
		}
		q.Close()
	}
}

// gatedSyncFS holds every fsync of a file while hold is set, until
// release is closed.
type gatedSyncFS struct {
	fileSystem
	hold    *atomic.Bool
	release chan struct{}
}

func (g gatedSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := g.fileSystem.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return gatedFile{f, g}, nil
}

type gatedFile struct {
	file
	g gatedSyncFS
}

func (f gatedFile) Sync() error {
	if f.g.hold.Load() {
		<-f.g.release
	}
	return f.file.Sync()
}

// TestPutCtxAndDurability: under SyncEvery 1, a Put whose ctx has ended
// stores nothing, and one whose ctx ends while it waits for its fsync
// says the record is stored (ErrNotDurable), which a reader then gets:
// before, both returned the context's error alone, and a caller could
// not tell a record that will be delivered from one that will not.
func TestPutCtxAndDurability(t *testing.T) {
	dir := t.TempDir()
	g := gatedSyncFS{fileSystem: vfs.OS, hold: new(atomic.Bool), release: make(chan struct{})}
	q := mustOpen(t, dir, Options{SyncEvery: 1, FS: g})
	defer q.Close()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Put(ended, []byte("never")); !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotDurable) {
		t.Fatalf("Put with an ended ctx: %v, want context.Canceled alone", err)
	}
	if n, err := q.PutBatch(ended, [][]byte{[]byte("never")}); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("PutBatch with an ended ctx: %d, %v", n, err)
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("Depth %d after Puts refused", d)
	}
	g.hold.Store(true)
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	err := q.Put(short, []byte("stored"))
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put whose fsync outlasted ctx: %v, want ErrNotDurable and DeadlineExceeded", err)
	}
	g.hold.Store(false)
	close(g.release)
	rec, err := q.Read(context.Background())
	if err != nil || string(rec.Body) != "stored" {
		t.Fatalf("Read: %q, %v", rec.Body, err)
	}
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// countingFS counts the bytes its files' ReadAt return.
type countingFS struct {
	fileSystem
	read *atomic.Int64
}

func (c countingFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := c.fileSystem.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.read}, nil
}

type countingFile struct {
	file
	read *atomic.Int64
}

func (f countingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.file.ReadAt(b, off)
	f.read.Add(int64(n))
	return n, err
}

// TestLookupsAfterClose: ReadAt, Scan, SeekTime, Position and
// Unacknowledged after Close return ErrClosed. They returned ErrNotFound
// ("segment 0 was deleted"), as if the records had been consumed (a user
// trial found it).
func TestLookupsAfterClose(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		dir := t.TempDir()
		q := mustOpen(t, dir, Options{})
		if err := q.Put(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if readOnly {
			q.Close()
			var err error
			if q, err = OpenReadOnly(dir, Options{}); err != nil {
				t.Fatal(err)
			}
		}
		q.Close()
		if _, err := q.ReadAt(0); !errors.Is(err, ErrClosed) {
			t.Errorf("readOnly %v: ReadAt after Close: %v", readOnly, err)
		}
		if _, err := q.SeekTime(time.Time{}); !errors.Is(err, ErrClosed) {
			t.Errorf("readOnly %v: SeekTime after Close: %v", readOnly, err)
		}
		if _, err := q.Position(0); !errors.Is(err, ErrClosed) {
			t.Errorf("readOnly %v: Position after Close: %v", readOnly, err)
		}
		for _, err := range q.Scan(0, 1) {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("readOnly %v: Scan after Close: %v", readOnly, err)
			}
		}
		for _, err := range q.Unacknowledged(0, 1) {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("readOnly %v: Unacknowledged after Close: %v", readOnly, err)
			}
		}
	}
}
