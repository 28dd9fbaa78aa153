package spillq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/nsqbridge"
)

// TestErrClosedOneValue: every package's ErrClosed is one value, so that
// errors.Is matches a closed error by any of their names, whichever layer
// returned it: here the disk log's, reached through a closed Queue, by the
// names a caller of spillq or channel tests.
func TestErrClosedOneValue(t *testing.T) {
	names := []struct {
		pkg string
		err error
	}{
		{"spillq", spillq.ErrClosed},
		{"channel", channel.ErrClosed},
		{"diskqueue", diskqueue.ErrClosed},
		{"nsqbridge", nsqbridge.ErrClosed},
	}
	for _, a := range names {
		for _, b := range names {
			if !errors.Is(a.err, b.err) {
				t.Errorf("errors.Is(%s.ErrClosed, %s.ErrClosed) is false", a.pkg, b.pkg)
			}
		}
	}

	q, err := spillq.Open(t.TempDir(), spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	disk := q.Disk()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = disk.ReadAt(0)
	if err == nil {
		t.Fatal("ReadAt on the disk log of a closed queue succeeded")
	}
	for _, n := range names {
		if !errors.Is(err, n.err) {
			t.Errorf("disk ReadAt after Close: %v; errors.Is(err, %s.ErrClosed) is false", err, n.pkg)
		}
	}
	if _, err := q.Compact(context.Background()); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("Queue.Compact after Close: %v; errors.Is(err, diskqueue.ErrClosed) is false", err)
	}
}
