package spillq

import (
	"context"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// SetKeySaveInterval makes the queues and topics opened from now on until
// t ends store their key state, and look for a compaction to start, every
// d instead of every second: for tests that wait for one of those. Tests
// of this package do not run in parallel, so a plain variable does.
func SetKeySaveInterval(t testing.TB, d time.Duration) {
	old := keySaveInterval
	keySaveInterval = d
	t.Cleanup(func() { keySaveInterval = old })
}

// DiskHealth is Health's judgement of a disk queue's Stats, for stats no
// test of this package can bring about (a sticky write error).
func DiskHealth(s diskqueue.Stats, opts HealthOptions) Health {
	var h Health
	judgeDisk(&h, "log", s, opts)
	return h
}

// TimerStats is q's deferred-message bookkeeping, which Queue keeps to
// itself (see channel.Channel.TimerStats).
func TimerStats(q *Queue) channel.TimerStats { return q.ch.TimerStats() }

// KeyState snapshots q's key state as the keeper does every second, which
// also prunes the entries the log's floor has passed.
func KeyState(q *Queue) (channel.KeyState, bool) { return q.ch.KeyState() }

// SyncDisk fsyncs q's disk log, for tests that wait for a round of its
// writer (segments deleted), which the read-only Disk view cannot ask.
func SyncDisk(ctx context.Context, q *Queue) error { return q.disk.Sync(ctx) }

// SyncLog is SyncDisk for a topic's log.
func SyncLog(ctx context.Context, t *Topic) error { return t.log.Sync(ctx) }

// StoredKeys returns the keys a stored key state file (b, the bytes of
// dir's KeysDir/state) names, for tests that wait for a store naming a
// key: such a store came after the key's Put, and so did the fsyncs the
// keeper makes before it stores.
func StoredKeys(b []byte) ([]string, error) {
	st, err := decodeKeyState(b)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(st.Entries))
	for i, e := range st.Entries {
		keys[i] = e.Key
	}
	return keys, nil
}
