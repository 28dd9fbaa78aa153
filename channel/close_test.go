package channel_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

func TestCloseFlushesAndRestartDelivers(t *testing.T) {
	b := newMemStore()
	c := newChannel(t, channel.Options{MemQueueSize: 5, Backend: b.store()})
	put(t, c, seq(8)...) // 5 in memory, 3 spilled
	inflight := receive(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inflight.Finish(); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Finish after Close: got %v, want ErrClosed", err)
	}
	c = newChannel(t, channel.Options{MemQueueSize: 5, Backend: b.reopen().store()})
	defer c.Close()
	got := map[string]int{}
	for i := 0; i < 8; i++ {
		m := receive(t, c)
		got[string(m.Body)]++
		// Close cut its first delivery short: not spent.
		if string(m.Body) == "m0000" && m.Attempts != 1 {
			t.Fatalf("in-flight message came back with attempts %d, want 1", m.Attempts)
		}
		m.Finish()
	}
	for _, want := range seq(8) {
		if got[want] != 1 {
			t.Fatalf("after restart %q delivered %d times", want, got[want])
		}
	}
}

// Close's wait for room is bounded in all, not per message (with n
// messages held in memory and a backend that stays full it took 5 s +
// (n-1) x 100 ms), and its error counts the messages lost.
func TestCloseStoresWithinItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		c := newChannel(t, channel.Options{MemQueueSize: n, Backend: blockingBackend{newMemStore()}.store()})
		for i := range n {
			put(t, c, fmt.Sprint(i))
		}
		start := time.Now()
		err := c.Close()
		took := time.Since(start)
		if took > 10*time.Second {
			t.Fatalf("Close with %d held messages and a full backend took %v", n, took)
		}
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d messages held in memory only are lost", n)) {
			t.Fatalf("Close: %v, want the %d messages it could not store counted lost", err, n)
		}
	})
}
