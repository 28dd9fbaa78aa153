package memlog_test

import (
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue/logtest"
	"github.com/spillq/spillq/internal/memlog"
)

// TestConformance holds the in-memory store the channel's tests run over
// to the seam's contract, as the disk log is (diskqueue's
// TestConformance): a test double that drifted from it would let the
// channel's tests pass over behaviour the disk log does not have.
func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
		l := memlog.NewLog()
		l.SetLimits(cfg.MinRecordBytes, cfg.MaxRecordBytes)
		return conformanceStore(l)
	})
}

func conformanceStore(l *memlog.Log) logtest.Store {
	return logtest.Store{
		Store:     channel.Store{Log: l, Cursor: l.Cursor("main"), Close: l.Close},
		NewCursor: func(_ *testing.T, name string) channel.Cursor { return l.Cursor(name) },
		Reopen:    func(*testing.T) logtest.Store { return conformanceStore(l.Reopen()) },
	}
}
