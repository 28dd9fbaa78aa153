package diskqueue_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestCompactRace hammers ReadAt, Scan and a cursor's Read and Ack while
// every sealed segment is compacted again and again (each round removes
// more) and a producer appends. Run with -race. Whatever the interleaving:
// ReadAt returns the record or ErrCompacted, never another error, and once
// a goroutine has seen a seq removed it never sees it again; a record that
// no round removes (every fifth) is always found; every Scan yields
// increasing seqs with the bodies put and every record no round removes;
// the cursor delivers each record once, in order, and every Ack succeeds;
// at the end exactly the records the rounds removed are gone.
func TestCompactRace(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	testCompactRace(t, diskqueue.Options{MaxSegmentBytes: 2048, RetainBytes: 1 << 30, NoSync: true})
}

// TestCompactRaceEvicting is TestCompactRace with room for the read
// handles of two sealed segments nobody holds and a cursor that looks
// for bitmaps to close once it has more than one open: handles and
// bitmaps are given back and opened again under the readers and the
// compactions all the time, and a compacted generation reopened must read
// as the one given back.
func TestCompactRaceEvicting(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	opts := diskqueue.Options{MaxSegmentBytes: 2048, RetainBytes: 1 << 30, NoSync: true}
	diskqueue.SetOpenSealed(&opts, 2)
	diskqueue.SetOpenBitmaps(&opts, 1)
	testCompactRace(t, opts)
}

func testCompactRace(t *testing.T, opts diskqueue.Options) {
	dir := t.TempDir()
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Cursor("c", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n, more = 600, 300
	rounds := 6
	if testing.Short() {
		rounds = 2 // each round compacts every initial segment once more
	}
	for i := 0; i < n; i++ {
		if err := l.Put(ctx, compactBody(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	protected := func(seq uint64) bool { return seq%5 == 0 }
	rank := func(seq uint64) int { return int(seq * 2654435761 % 7) } // round rank+1 removes it, if rank < rounds
	keepAfter := func(round int) func(diskqueue.Record) bool {
		return func(rec diskqueue.Record) bool { return protected(rec.Seq) || rank(rec.Seq) >= round }
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var errs []error
	var errMu sync.Mutex
	report := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	// ReadAt.
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			removed := map[uint64]bool{}
			for !stopped() {
				seq := uint64(rng.IntN(n))
				rec, err := l.ReadAt(seq)
				switch {
				case errors.Is(err, diskqueue.ErrCompacted) && !protected(seq):
					removed[seq] = true
				case err != nil:
					report(errors.Join(errors.New("ReadAt"), err))
					return
				case removed[seq]:
					report(errors.New("ReadAt found a record it had seen removed"))
					return
				case rec.Seq != seq || string(rec.Body) != string(compactBody(seq)):
					report(errors.New("ReadAt served a wrong record"))
					return
				}
			}
		}()
	}
	// Scan.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() {
			next := uint64(0) // every protected seq below this was yielded
			for rec, err := range l.Scan(0, n) {
				if err != nil {
					report(errors.Join(errors.New("Scan"), err))
					return
				}
				if rec.Seq < next || string(rec.Body) != string(compactBody(rec.Seq)) {
					report(errors.New("Scan yields a wrong or repeated record"))
					return
				}
				for s := next; s < rec.Seq; s++ {
					if protected(s) {
						report(errors.New("Scan skipped a record no compaction removes"))
						return
					}
				}
				next = rec.Seq + 1
			}
		}
	}()
	// The cursor, acknowledging everything it reads, from the oldest
	// record again and again (ResetCursor), so its reads race the rounds.
	var delivered atomic.Int64
	pass := func() (last uint64, err error) {
		if err := l.ResetCursor("c", diskqueue.FromOldest()); err != nil {
			return 0, err
		}
		c, err := l.Cursor("c", diskqueue.FromOldest())
		if err != nil {
			return 0, err
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		next := uint64(0)
		for {
			rec, err := c.Read(done)
			if errors.Is(err, context.Canceled) {
				return next, nil
			}
			if err != nil {
				return 0, errors.Join(errors.New("Read"), err)
			}
			if rec.Seq < next || string(rec.Body) != string(compactBody(rec.Seq)) {
				return 0, errors.New("Read delivers a wrong or repeated record")
			}
			for s := next; s < rec.Seq; s++ {
				if protected(s) {
					return 0, errors.New("Read skipped a record no compaction removes")
				}
			}
			next = rec.Seq + 1
			if err := c.Ack(rec.Seq); err != nil {
				return 0, errors.Join(errors.New("Ack"), err)
			}
			delivered.Add(1)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() {
			if _, err := pass(); err != nil {
				report(err)
				return
			}
		}
	}()
	// A producer: new segments rotate and seal under the compactions.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := n; i < n+more; i++ {
			if err := l.Put(ctx, compactBody(uint64(i))); err != nil {
				report(err)
				return
			}
		}
	}()
	// The compactor: round r removes the records of rank r-1.
	var initial []diskqueue.SegmentInfo
	for _, s := range l.Segments() {
		if s.Sealed && s.End <= n {
			initial = append(initial, s)
		}
	}
	compactions := 0
	for round := 1; round <= rounds; round++ {
		for _, s := range initial {
			st, err := l.Compact(ctx, s.Base, keepAfter(round))
			if err != nil {
				t.Fatalf("round %d: Compact(%d): %v", round, s.Base, err)
			}
			if st.Removed > 0 {
				compactions++
			}
		}
	}
	close(stop)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if compactions < len(initial)*(rounds-1) {
		t.Fatalf("%d compactions removed something, want about %d", compactions, len(initial)*rounds)
	}
	last := initial[len(initial)-1].End
	for seq := uint64(0); seq < n; seq++ {
		_, err := l.ReadAt(seq)
		gone := seq < last && !protected(seq) && rank(seq) < rounds
		if gone != errors.Is(err, diskqueue.ErrCompacted) || !gone && err != nil {
			t.Fatalf("at the end ReadAt(%d): %v (removed by a round: %v)", seq, err, gone)
		}
	}
	if next, err := pass(); err != nil || next != n+more {
		t.Fatalf("a last pass of the cursor: up to %d, %v; want %d", next, err, n+more)
	}
	if c, _ := l.Cursor("c", diskqueue.FromOldest()); c.Depth() != 0 {
		t.Fatalf("Depth %d after reading and acknowledging everything", c.Depth())
	}
	t.Logf("%d compactions of %d segments; %d records delivered", compactions, len(initial), delivered.Load())
}
