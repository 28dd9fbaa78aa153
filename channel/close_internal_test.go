package channel

import (
	"context"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/memlog"
)

// memlogStore is l and its cursor as a channel's store.
func memlogStore(l *memlog.Log) Store {
	return Store{Log: l, Cursor: l.Cursor(""), Close: l.Close}
}

// TestCloseWaitsForATakenMessage: a Receive is take (the message leaves
// the memory buffer, the ready list or the read-ahead) then deliver (it
// goes in flight). Close collected the lists and the flights without
// waiting for a receiver between the two, which then put its message in
// flight in the closed channel: neither stored nor counted lost, and a
// Requeue of it returned nil. Here the receiver stops between the two
// (the steps Receive takes, one at a time) while Close runs (a review of
// Close's races found it; found again by replaying them).
func TestCloseWaitsForATakenMessage(t *testing.T) {
	b := memlog.NewLog()
	c, err := New(Options{MemQueueSize: 4, Backend: memlogStore(b), MsgTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Put(ctx, []byte("m")); err != nil {
		t.Fatal(err)
	}
	if !c.enterTake() {
		t.Fatal("enterTake refused before Close")
	}
	m, err := c.take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a receiver held a message it had taken and not delivered", err)
	case <-time.After(50 * time.Millisecond):
	}
	dm, ok := c.deliver(m)
	c.leaveTake()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ok {
		if err := dm.Requeue(0); err == nil {
			t.Errorf("Requeue after Close returned nil")
		}
	}
	stored := int(b.NextSeq())
	if stored != 1 {
		t.Fatalf("Close stored %d messages, want 1: the one a receiver took as Close ran", stored)
	}
	if _, err := c.Receive(ctx); err != ErrClosed {
		t.Errorf("Receive after Close: %v, want ErrClosed", err)
	}
}
