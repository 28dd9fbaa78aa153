package spillq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq"
)

// TestTopicRestartDeliversHeldFirst is the user's trial of FORMAT.md's
// promise ("Topics"): what a topic's channel held at a graceful Close (in
// flight, in its memory buffer) is delivered first when it is opened
// again, ahead of its unread backlog in the log and of anything put after
// the reopen. Ten restarts each, Receive called as soon as Topic.Channel
// returns. Before the fix the held messages were found by a read of the
// timer store in the background, and Receive took the backlog (or a new
// message) meanwhile: in most restarts some came late, up to behind the
// whole backlog.
func TestTopicRestartDeliversHeldFirst(t *testing.T) {
	for _, tc := range []struct {
		channels int
		mem      int  // ChannelOptions.MemQueueSize
		putAfter bool // a Put right after the reopen
	}{
		{channels: 1},
		{channels: 5, putAfter: true},
		{channels: 5, mem: 200, putAfter: true},
	} {
		t.Run(fmt.Sprintf("channels=%d,mem=%d,putAfter=%v", tc.channels, tc.mem, tc.putAfter), func(t *testing.T) {
			const restarts, perRound, inFlight = 10, 100, 10
			dir := t.TempDir()
			names := make([]string, tc.channels)
			for i := range names {
				names[i] = fmt.Sprintf("ch%d", i)
			}
			opts := spillq.ChannelOptions{MemQueueSize: tc.mem}
			tp := openTopic(t, dir, spillq.TopicOptions{})
			chans := make([]*spillq.Channel, len(names))
			for i, name := range names {
				chans[i] = topicChannel(t, tp, name, opts)
			}
			defer func() { tp.Close() }()
			next := 0
			for r := range restarts {
				from := next
				putRange(t, tp, from, from+perRound)
				next += perRound
				inMemory := tp.Stats().ToLog == 0
				held := make([][]int, len(chans))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				for i, ch := range chans {
					for range inFlight {
						m, err := ch.Receive(ctx)
						if err != nil {
							t.Fatalf("restart %d, %s: Receive: %v", r, names[i], err)
						}
						held[i] = append(held[i], index(t, m)) // left in flight
					}
					if inMemory {
						// The rest waits in the memory buffer: held too.
						held[i] = span(from, from+perRound)
					}
				}
				cancel()
				if err := tp.Close(); err != nil {
					t.Fatalf("restart %d: Close: %v", r, err)
				}
				tp = openTopic(t, dir, spillq.TopicOptions{})
				for i, name := range names {
					chans[i] = topicChannel(t, tp, name, opts)
				}
				want := perRound
				if tc.putAfter {
					putRange(t, tp, next, next+1)
					next++
					want++
				}
				for i, ch := range chans {
					got := take(t, ch, want)
					first := slices.Clone(got[:len(held[i])])
					slices.Sort(first)
					slices.Sort(held[i])
					if !slices.Equal(first, held[i]) {
						late := []string{}
						for _, h := range held[i] {
							if p := slices.Index(got, h); p >= len(held[i]) {
								late = append(late, fmt.Sprintf("#%d at %d", h, p))
							}
						}
						t.Errorf("restart %d, %s: the %d messages held at Close are not delivered first: late %v", r, names[i], len(held[i]), late)
					}
				}
			}
		})
	}
}

// TestQueueRestartHeldAfterBacklog: a queue of its own (spillq.Open)
// promises the other order (docs/guarantees.md's Order, package channel's
// Ordering): what it held at Close goes to its log behind the backlog, and
// comes after it, in every restart.
func TestQueueRestartHeldAfterBacklog(t *testing.T) {
	const restarts, perRound, inFlight = 5, 100, 10
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{})
	defer func() { q.Close() }()
	ctx := context.Background()
	next := 0
	for r := range restarts {
		from := next
		for i := from; i < from+perRound; i++ {
			if err := q.Put(ctx, body(i)); err != nil {
				t.Fatal(err)
			}
		}
		next += perRound
		var held []int
		for range inFlight {
			m, err := q.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, index(t, m))
		}
		if err := q.Close(); err != nil {
			t.Fatalf("restart %d: Close: %v", r, err)
		}
		q = open(t, dir, spillq.Options{})
		got := take(t, q, perRound)
		// Among themselves in no promised order (in flight is sharded).
		tail := slices.Sorted(slices.Values(got[perRound-inFlight:]))
		if !slices.Equal(got[:perRound-inFlight], span(from+inFlight, from+perRound)) || !slices.Equal(tail, held) {
			t.Fatalf("restart %d: got %v; want the backlog, then the %d held at Close", r, got, inFlight)
		}
	}
}
