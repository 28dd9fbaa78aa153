package spillq_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

func wantHealth(t *testing.T, h spillq.Health, status spillq.HealthStatus, reason string) {
	t.Helper()
	if h.Status != status || (reason == "" && len(h.Reasons) != 0) || !strings.Contains(strings.Join(h.Reasons, "\n"), reason) {
		t.Fatalf("health %q, want %v with a reason containing %q", h, status, reason)
	}
}

// TestQueueHealth: ok; degraded by depth and by lag beyond the user's
// thresholds; failed once closed.
func TestQueueHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := spillq.Open(t.TempDir(), spillq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		opts := spillq.HealthOptions{MaxDepth: 3, MaxLag: time.Minute}
		wantHealth(t, q.Health(opts), spillq.HealthOK, "")
		ctx := context.Background()
		for i := 0; i < 4; i++ {
			if err := q.Put(ctx, body(i)); err != nil {
				t.Fatal(err)
			}
		}
		wantHealth(t, q.Health(opts), spillq.HealthDegraded, "depth 4 beyond 3")
		if h := q.Health(opts); strings.Contains(h.String(), "lag") {
			t.Fatalf("lag reported before a minute passed: %s", h)
		}
		time.Sleep(2 * time.Minute)
		wantHealth(t, q.Health(opts), spillq.HealthDegraded, "lag 2m0s beyond 1m0s")
		wantHealth(t, q.Health(spillq.HealthOptions{}), spillq.HealthOK, "")
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		wantHealth(t, q.Health(opts), spillq.HealthFailed, "closed")
	})
}

// TestQueueHealthDiskBudget: a queue that fills its disk budget is
// degraded, and ok again once its consumer frees the space.
func TestQueueHealthDiskBudget(t *testing.T) {
	const budget = 64 << 10
	q, err := spillq.Open(t.TempDir(), spillq.Options{Disk: diskqueue.Options{MaxDiskBytes: budget, MaxSegmentBytes: 8 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	big := make([]byte, 1000)
	n := 0
	for ; ; n++ {
		err := q.Put(ctx, big)
		if errors.Is(err, diskqueue.ErrDiskFull) {
			break
		}
		if err != nil || n > budget/len(big) {
			t.Fatalf("put %d: %v (the budget should have refused one by now)", n, err)
		}
	}
	wantHealth(t, q.Health(spillq.HealthOptions{}), spillq.HealthDegraded, "log disk")
	for i := 0; i < n; i++ {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	if err := spillq.SyncDisk(ctx, q); err != nil {
		t.Fatal(err)
	}
	if h := q.Health(spillq.HealthOptions{}); h.Status != spillq.HealthOK {
		st := q.Disk().Stats()
		t.Fatalf("health after draining: %s (disk %d of %d bytes)", h, st.DiskBytes, st.MaxDiskBytes)
	}
}

// TestTopicHealth: each channel is judged, open or not, named in its
// reason.
func TestTopicHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		top, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fast, err := top.Channel("fast", spillq.ChannelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slow, err := top.Channel("slow", spillq.ChannelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := slow.Close(); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := top.Put(ctx, body(0)); err != nil {
			t.Fatal(err)
		}
		m, err := fast.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		h := top.Health(spillq.HealthOptions{MaxLag: time.Minute})
		wantHealth(t, h, spillq.HealthDegraded, "channel slow: lag 1h0m0s beyond 1m0s")
		if len(h.Reasons) != 1 {
			t.Fatalf("reasons: %q, want slow's alone", h.Reasons)
		}
		if err := top.Close(); err != nil {
			t.Fatal(err)
		}
		wantHealth(t, top.Health(spillq.HealthOptions{}), spillq.HealthFailed, "closed")
	})
}

// TestHealthWriteError: a sticky write error fails the queue.
func TestHealthWriteError(t *testing.T) {
	wantHealth(t, spillq.DiskHealth(diskqueue.Stats{}, spillq.HealthOptions{}), spillq.HealthOK, "")
	h := spillq.DiskHealth(diskqueue.Stats{WriteErr: syscall.EIO}, spillq.HealthOptions{})
	wantHealth(t, h, spillq.HealthFailed, "log takes no writes until reopened: input/output error")
	h = spillq.DiskHealth(diskqueue.Stats{DiskBytes: 95, MaxDiskBytes: 100}, spillq.HealthOptions{})
	wantHealth(t, h, spillq.HealthDegraded, "log disk near its budget: 95 of 100 bytes")
	wantHealth(t, spillq.DiskHealth(diskqueue.Stats{DiskBytes: 95, MaxDiskBytes: 100}, spillq.HealthOptions{DiskFullRatio: 0.96}), spillq.HealthOK, "")
}

func TestCombineHealth(t *testing.T) {
	h := spillq.CombineHealth(map[string]spillq.Health{
		"b": {Status: spillq.HealthDegraded, Reasons: []string{"lag"}},
		"a": {Status: spillq.HealthFailed, Reasons: []string{"closed"}},
		"c": {},
	})
	if h.Status != spillq.HealthFailed || strings.Join(h.Reasons, ",") != "a: closed,b: lag" || h.String() != "failed: a: closed; b: lag" {
		t.Fatalf("combined: %+v", h)
	}
}

// TestTopicHealthOpensNoStore: Health judges a channel not open by its
// cursor, and opens none of its stores on disk (Stats reads the
// dead-letter store's depth at each call), so a probe every few seconds
// costs no file opens however many channels are closed.
func TestTopicHealthOpensNoStore(t *testing.T) {
	efs := &vfs.ErrorFS{}
	tp := openTopic(t, t.TempDir(), spillq.TopicOptions{Disk: diskqueue.Options{FS: efs}})
	defer tp.Close()
	if err := topicChannel(t, tp, "a", spillq.ChannelOptions{}).Close(); err != nil {
		t.Fatal(err)
	}
	efs.Arm(vfs.OpOpen, 1, errors.New("no opens in Health"), true)
	wantHealth(t, tp.Health(spillq.HealthOptions{}), spillq.HealthOK, "")
	if n := efs.Fired(); n != 0 {
		t.Fatalf("Health opened %d files", n)
	}
	efs.Heal()
}
