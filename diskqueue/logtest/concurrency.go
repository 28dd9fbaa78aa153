package logtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

func testConcurrency(t *testing.T, open Opener) {
	t.Run("ProducersAndReaders", func(t *testing.T) {
		const producers, perProducer, readers = 4, 300, 3
		const total = producers * perProducer
		h := newHarness(t, open, defaultConfig)
		c2 := h.newCursor("second")
		first := h.log().NextSeq()

		ctx, cancel := context.WithTimeout(t.Context(), guard)
		defer cancel()
		var (
			putSeqs sync.Map // body -> seq, for records put with PutSeq
			order   = newLedger()
			other   = newLedger()
			done    = make(chan struct{}) // closed when every reader is done
			wg      sync.WaitGroup
			readWG  sync.WaitGroup
		)
		for p := range producers {
			wg.Go(func() {
				h.produce(ctx, p, perProducer, &putSeqs)
				if t.Failed() {
					cancel() // the readers would wait for records never put
				}
			})
		}
		// Cursor 1: several readers sharing it, each giving back once
		// some records it read instead of acknowledging them.
		readCtx, stopReaders := context.WithCancel(ctx)
		defer stopReaders()
		var unreadOK atomic.Bool
		unreadOK.Store(true)
		for range readers {
			readWG.Go(func() {
				h.consume(readCtx, h.cursor(), order, &unreadOK, func(acked int) {
					if acked == total {
						stopReaders()
					}
				})
				if t.Failed() {
					cancel()
				}
			})
		}
		// Cursor 2, if any: one reader, so every record in seq order.
		if c2 != nil {
			readWG.Go(func() {
				var never atomic.Bool
				last := first - 1
				c2ctx, stop := context.WithCancel(ctx)
				defer stop()
				h.consume(c2ctx, c2, other, &never, func(acked int) {
					if acked == total {
						stop()
					}
				})
				for _, seq := range other.handedOrder {
					if seq != last+1 {
						t.Errorf("cursor 2, read alone, handed out seq %d after %d", seq, last)
						return
					}
					last = seq
				}
			})
		}
		wg.Go(func() { h.watch(done) })
		go func() { readWG.Wait(); close(done) }()
		wg.Wait()
		if t.Failed() {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("readers acknowledged %d of %d records in %v: some were lost", order.ackCount(), total, guard)
		}

		order.check(t, "cursor 1", first, total, producers)
		if c2 != nil {
			other.check(t, "cursor 2", first, total, producers)
		}
		putSeqs.Range(func(k, v any) bool {
			if got := order.bodies[v.(uint64)]; got != k.(string) {
				t.Errorf("PutSeq of %q returned seq %d, which holds %q", k, v, got)
			}
			return true
		})
		if next := h.log().NextSeq(); next != first+total {
			t.Fatalf("NextSeq after %d records = %d, want %d", total, next, first+total)
		}
		for name, c := range map[string]channel.Cursor{"1": h.cursor(), "2": c2} {
			if c == nil {
				continue
			}
			checkDepth(t, c, 0, "of cursor "+name+" after acking every record")
			if f := c.Floor(); f != first+total {
				t.Fatalf("Floor of cursor %s after acking every record = %d, want %d", name, f, first+total)
			}
			if p := c.Passed(); p != 0 {
				t.Fatalf("Passed of cursor %s = %d, want 0", name, p)
			}
		}
		if f := h.log().Floor(); f != first+total {
			t.Fatalf("log Floor after acking every record = %d, want %d", f, first+total)
		}
	})
}

// produce puts n records tagged with producer p, mixing Put, PutSeq and
// PutBatch (those the store has).
func (h *harness) produce(ctx context.Context, p, n int, putSeqs *sync.Map) {
	seqOK, batchOK := true, true
	for j := 0; j < n; {
		switch {
		case batchOK && j%7 == 3:
			bodies := make([][]byte, min(4, n-j))
			for i := range bodies {
				bodies[i] = h.body(fmt.Sprintf("p%d", p), j+i)
			}
			k, err := h.log().PutBatch(ctx, bodies)
			if errors.Is(err, errors.ErrUnsupported) {
				batchOK = false
				continue
			}
			if err != nil || k != len(bodies) {
				h.t.Errorf("producer %d: PutBatch of %d = %d, %v", p, len(bodies), k, err)
				return
			}
			j += k
		case seqOK && j%2 == 1:
			b := h.body(fmt.Sprintf("p%d", p), j)
			seq, err := h.log().PutSeq(ctx, b)
			if errors.Is(err, errors.ErrUnsupported) {
				seqOK = false
				continue
			}
			if err != nil {
				h.t.Errorf("producer %d: PutSeq: %v", p, err)
				return
			}
			putSeqs.Store(string(b), seq)
			j++
		default:
			if err := h.log().Put(ctx, h.body(fmt.Sprintf("p%d", p), j)); err != nil {
				h.t.Errorf("producer %d: Put: %v", p, err)
				return
			}
			j++
		}
	}
}

// consume reads from c until ctx ends, acknowledging each record, except
// that, while unreadOK, it gives back once every fifth seq instead.
// acked is told the count of records acknowledged on c after each ack.
func (h *harness) consume(ctx context.Context, c channel.Cursor, l *ledger, unreadOK *atomic.Bool, acked func(int)) {
	dst := make([]diskqueue.Record, 8)
	for {
		n, err := c.ReadBatch(ctx, dst)
		if n < 0 || n > len(dst) {
			h.t.Errorf("ReadBatch into %d slots returned %d", len(dst), n)
			return
		}
		for _, r := range dst[:n] {
			if unreadOK.Load() && r.Seq%5 == 0 && l.giveBack(r) {
				err := c.Unread([]diskqueue.Record{r})
				if err == nil {
					continue
				}
				if !errors.Is(err, errors.ErrUnsupported) {
					h.t.Errorf("Unread(%d): %v", r.Seq, err)
					return
				}
				unreadOK.Store(false)
				l.keep(r.Seq)
			}
			if err := c.Ack(r.Seq); err != nil {
				h.t.Errorf("Ack(%d): %v", r.Seq, err)
				return
			}
			acked(l.ack(r))
		}
		if err != nil {
			if ctx.Err() == nil {
				h.t.Errorf("ReadBatch: %v", err)
			}
			return
		}
	}
}

// watch reads the counters while records come and go, for the race
// detector, and checks what holds at every moment: Depth is not
// negative, Floors never go back nor past NextSeq.
func (h *harness) watch(done <-chan struct{}) {
	var lastLog, lastCursor uint64
	for {
		select {
		case <-done:
			return
		default:
		}
		logFloor, curFloor := h.log().Floor(), h.cursor().Floor()
		next := h.log().NextSeq()
		if d := h.cursor().Depth(); d < 0 {
			h.t.Errorf("Depth = %d", d)
			return
		}
		if logFloor < lastLog || curFloor < lastCursor || logFloor > next || curFloor > next {
			h.t.Errorf("Floors went from log %d, cursor %d to %d, %d (NextSeq %d)", lastLog, lastCursor, logFloor, curFloor, next)
			return
		}
		lastLog, lastCursor = logFloor, curFloor
		runtime.Gosched() // a reader, not a spinner: let the workers run
		h.log().Acknowledged(curFloor)
		if _, err := h.log().ReadAt(curFloor); err != nil && !errors.Is(err, diskqueue.ErrNotFound) && !errors.Is(err, errors.ErrUnsupported) {
			h.t.Errorf("ReadAt(%d) while records come and go: %v", curFloor, err)
			return
		}
	}
}

// ledger is what the readers of one cursor saw.
type ledger struct {
	mu          sync.Mutex
	handed      map[uint64]int    // times each seq was handed out
	acked       map[uint64]int    // times each seq was acknowledged
	givenBack   map[uint64]bool   // seqs given back with Unread
	bodies      map[uint64]string // body of each seq
	handedOrder []uint64
}

func newLedger() *ledger {
	return &ledger{handed: map[uint64]int{}, acked: map[uint64]int{}, givenBack: map[uint64]bool{}, bodies: map[uint64]string{}}
}

// giveBack records r handed out and reports whether to give it back: the
// first time it is handed out only.
func (l *ledger) giveBack(r diskqueue.Record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.givenBack[r.Seq] {
		return false
	}
	l.givenBack[r.Seq] = true
	l.handed[r.Seq]++
	l.bodies[r.Seq] = string(r.Body)
	return true
}

// keep forgets that seq was to be given back, when Unread is unsupported.
func (l *ledger) keep(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.givenBack, seq)
	l.handed[seq]--
}

func (l *ledger) ack(r diskqueue.Record) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handed[r.Seq]++
	l.acked[r.Seq]++
	if prev, ok := l.bodies[r.Seq]; ok && prev != string(r.Body) {
		l.bodies[r.Seq] = "handed out as " + prev + " then as " + string(r.Body)
	} else {
		l.bodies[r.Seq] = string(r.Body)
	}
	l.handedOrder = append(l.handedOrder, r.Seq)
	return len(l.acked)
}

func (l *ledger) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// check fails unless every seq from first to first+total was acknowledged
// once, handed out once more for each time given back, with every body
// put exactly once, each producer's in the order it put them.
func (l *ledger) check(t *testing.T, name string, first uint64, total, producers int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acked) != total {
		t.Fatalf("%s: %d distinct seqs acknowledged, want %d", name, len(l.acked), total)
	}
	seqOf := map[string]uint64{}
	for seq := first; seq < first+uint64(total); seq++ {
		if l.acked[seq] != 1 {
			t.Fatalf("%s: seq %d acknowledged %d times, want 1", name, seq, l.acked[seq])
		}
		want := 1
		if l.givenBack[seq] {
			want = 2
		}
		if l.handed[seq] != want {
			t.Fatalf("%s: seq %d handed out %d times, want %d (given back: %v)", name, seq, l.handed[seq], want, l.givenBack[seq])
		}
		if prev, dup := seqOf[l.bodies[seq]]; dup {
			t.Fatalf("%s: body %q at seqs %d and %d", name, l.bodies[seq], prev, seq)
		}
		seqOf[l.bodies[seq]] = seq
	}
	for p := range producers {
		var last uint64
		for j := 0; ; j++ {
			// the harness's body for (p, j), without its padding
			prefix := fmt.Sprintf("p%d-%04d", p, j)
			seq, ok := lookupPrefix(seqOf, prefix)
			if !ok {
				if j != total/producers {
					t.Fatalf("%s: producer %d's record %d (%q) never read", name, p, j, prefix)
				}
				break
			}
			if j > 0 && seq <= last {
				t.Fatalf("%s: producer %d's record %d has seq %d, after its record %d at %d", name, p, j, seq, j-1, last)
			}
			last = seq
		}
	}
}

// lookupPrefix finds the seq of the body that is prefix, padded or not.
func lookupPrefix(seqOf map[string]uint64, prefix string) (uint64, bool) {
	if seq, ok := seqOf[prefix]; ok {
		return seq, true
	}
	for body, seq := range seqOf {
		if len(body) > len(prefix) && body[:len(prefix)] == prefix && body[len(prefix)] == '.' {
			return seq, true
		}
	}
	return 0, false
}
