package godq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue/godq"
)

func newGoDiskQueue(t *testing.T, dir string) godiskqueue.Interface {
	t.Helper()
	return godiskqueue.New("jobs", dir, 1<<20, 0, 1<<20, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {})
}

func body(i int) []byte { return []byte(fmt.Sprintf("job-%06d", i)) }

// TestChannelBackend runs the channel over nsqd's own disk queue.
func TestChannelBackend(t *testing.T) {
	c, err := channel.New(channel.Options{MemQueueSize: 10, Backend: godq.ChannelBackend(newGoDiskQueue(t, t.TempDir()))})
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
