package godq_test

import (
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue/godq"
	"github.com/spillq/spillq/diskqueue/logtest"
)

// TestConformance holds the go-diskqueue adapter to the seam's contract:
// what it carries behaves as the disk log does, and what it cannot carry
// says errors.ErrUnsupported every time (the suite logs which). One
// cursor, and no Reopen: go-diskqueue numbers nothing, so no seq, ack or
// floor survives a restart to be checked.
func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
		dq := godiskqueue.New("conformance", t.TempDir(), 64<<10, 0, 1<<20, 2500, time.Second,
			func(godiskqueue.LogLevel, string, ...interface{}) {})
		return logtest.Store{Store: godq.ChannelBackend(dq)}
	})
}
