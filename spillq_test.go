package spillq_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestOpenRefusesRawLogs: a directory the diskqueue package wrote
// directly holds records that are not channel messages. Open and OpenTopic
// refuse it, rather than counting each record bad and dropping it, and
// every record is still there for diskqueue.Open.
func TestOpenRefusesRawLogs(t *testing.T) {
	ctx := context.Background()
	qd := t.TempDir()
	dq, err := diskqueue.Open(qd, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := dq.Put(ctx, []byte("raw record")); err != nil {
			t.Fatal(err)
		}
	}
	dq.Close()
	if q, err := spillq.Open(qd, spillq.Options{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		if q != nil {
			q.Close()
		}
		t.Fatalf("Open of a raw queue: %v, want ErrInvalidOptions", err)
	}
	if dq, err = diskqueue.Open(qd, diskqueue.Options{}); err != nil {
		t.Fatal(err)
	}
	if d := dq.Depth(); d != 10 {
		t.Errorf("after the refusal the raw queue holds %d records, want 10", d)
	}
	dq.Close()

	ld := t.TempDir()
	l, err := diskqueue.OpenLog(ld, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cursor("a", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, []byte("raw record")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if tp, err := spillq.OpenTopic(ld, spillq.TopicOptions{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		if tp != nil {
			tp.Close()
		}
		t.Fatalf("OpenTopic of a raw log: %v, want ErrInvalidOptions", err)
	}
}

// TestOpenRefusedMakesNoDirectory: Open with channel options it refuses
// made the queue's directory first.
func TestOpenRefusedMakesNoDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if _, err := spillq.Open(dir, spillq.Options{MemQueueSize: -1}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("Open with MemQueueSize -1: %v, want ErrInvalidOptions", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open refused its options and left %s behind (stat: %v)", dir, err)
	}
}
