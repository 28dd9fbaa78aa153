package spillq

import (
	"context"
	"errors"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

// TestCompactSlot pins the one slot both kinds of compaction take: the
// background one does not start while a Compact runs, and a Compact whose
// ctx ends while another runs gives up without running.
func TestCompactSlot(t *testing.T) {
	q, err := Open(t.TempDir(), Options{Keys: KeyReplace})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	c := q.comp
	c.slot <- struct{}{} // a compaction running
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.compact(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Compact waiting for a running compaction, ctx cancelled: %v, want context.Canceled", err)
	}
	real := c.dq
	c.dq = dirtyLog{real} // due at once, were the slot free
	c.maybeStart()
	c.running.Wait()
	if got := c.stats().Runs; got != 0 {
		t.Fatalf("%d compactions ran while the slot was held", got)
	}
	<-c.slot
	c.maybeStart() // control: with the slot free, it runs
	c.running.Wait()
	if got := c.stats().Runs; got != 1 {
		t.Fatalf("%d background compactions ran with the slot free, want 1", got)
	}
	c.dq = real
	st, err := c.compact(context.Background())
	if err != nil || st.Runs != 1 || c.stats().Runs != 2 {
		t.Fatalf("Compact with the slot free: %+v, %v", st, err)
	}
	select {
	case c.slot <- struct{}{}:
		<-c.slot
	default:
		t.Fatal("Compact kept the slot")
	}
}

// dirtyLog is a log with two sealed segments, none of them compacted.
type dirtyLog struct{ compactLog }

func (dirtyLog) Segments() []diskqueue.SegmentInfo {
	return []diskqueue.SegmentInfo{{Base: 0, Bytes: 10, Sealed: true}, {Base: 1, Bytes: 10, Sealed: true}}
}
