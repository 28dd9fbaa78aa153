package channel

import (
	"context"
	"testing"
	"time"
)

// TestFlightListsStaySorted: deliveries and Touches in any mix leave every
// shard's in-flight list sorted by deadline, which expireInFlight relies
// on to stop at the first message not yet due. (Touch used to read a finer
// clock than deliveries did, so a message delivered after a Touch could
// sit behind it with an earlier deadline.)
func TestFlightListsStaySorted(t *testing.T) {
	c, err := New(Options{MemQueueSize: 1000, MsgTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var held []*Message
	for i := range 300 {
		if err := c.Put(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
		if i%3 == 0 {
			time.Sleep(50 * time.Microsecond) // let the real clock pass the coarse one
			if err := held[i/2].Touch(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.lockFlights()
	defer c.unlockFlights()
	for i := range c.flights {
		for m := c.flights[i].head; m != nil && m.next != nil; m = m.next {
			if m.next.deadline < m.deadline {
				t.Fatalf("shard %d: deadline %d after %d", i, m.next.deadline, m.deadline)
			}
		}
	}
}
