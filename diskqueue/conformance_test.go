package diskqueue_test

import (
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/diskqueue/logtest"
)

// TestConformance runs the seam's conformance suite against the log and
// its cursors, with segments small enough that the suite's records span
// several, so that acknowledged ones are deleted under it.
func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
		opts := diskqueue.Options{
			MaxSegmentBytes: 1024,
			MaxRecordBytes:  cfg.MaxRecordBytes,
			MinRecordBytes:  cfg.MinRecordBytes,
		}
		return openConformance(t, t.TempDir(), opts)
	})
}

func openConformance(t *testing.T, dir string, opts diskqueue.Options) logtest.Store {
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		t.Fatalf("OpenLog: %v", err)
	}
	cursor := func(t *testing.T, name string) channel.Cursor {
		c, err := l.Cursor(name, diskqueue.FromNext())
		if err != nil {
			t.Fatalf("Cursor(%q): %v", name, err)
		}
		return c
	}
	return logtest.Store{
		Store:     channel.Store{Log: l, Cursor: cursor(t, "main"), Close: l.Close},
		NewCursor: cursor,
		Reopen:    func(t *testing.T) logtest.Store { return openConformance(t, dir, opts) },
	}
}
