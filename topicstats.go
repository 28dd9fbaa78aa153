package spillq

import (
	"path/filepath"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// TopicStats is a snapshot of a topic.
type TopicStats struct {
	// Log is the log's state; its cursor fields are those of the channel
	// furthest behind.
	Log diskqueue.Stats
	// Puts and the rest count the topic's Puts: through the channels'
	// memory buffers, or to the log.
	Puts, ToMemory, ToLog, PutFailures int64
	// KeysPending and Duplicates are the key policy's (see
	// channel.FanoutStats); each channel counts what it dropped as
	// superseded in its Channel.Superseded.
	KeysPending int
	Duplicates  int64
	// Channels has one entry per channel, by name.
	Channels []ChannelStats
}

// ChannelStats is a snapshot of one channel of a topic.
type ChannelStats struct {
	Name string
	// Open says the channel is open in this process ([Topic.Channel]); a
	// channel that is not still holds its messages in the log.
	Open bool
	// Cursor is the channel's place in the log. Its Depth is the channel's
	// lag in records: put to the log and not yet finished by it.
	Cursor diskqueue.CursorStats
	// Lag is how long ago the oldest record the channel has not finished
	// was put; zero when it has finished them all.
	Lag time.Duration
	// Timers is how many messages the channel keeps in its timer store
	// (dir's channels/NAME), which Cursor.Depth and Lag leave out: those
	// deferred and, since its last Close, what it held then (in flight,
	// requeued, in its memory buffer), which it delivers first when
	// opened again. A message the channel has not finished is counted in
	// one of Cursor.Depth and Timers (in both for the moment it moves
	// from the log to the timer store).
	Timers int64
	// DeadLetters is how many dead letters the channel's dead-letter
	// store holds ([Topic.DeadLetters]).
	DeadLetters int64
	// Channel is the channel's own state and counters, when Open.
	Channel channel.Stats
}

// Stats returns a snapshot of the topic and each of its channels. It reads
// one record per channel that is behind, to tell its lag in time. The
// timer and dead-letter stores of a channel not open are read once, the
// first time, and their depths kept until the channel opens: nothing
// changes them meanwhile (an operator's purge, [OpenDeadLetters], waits
// for the topic's lock).
func (t *Topic) Stats() TopicStats { return t.stats(true) }

// stats is Stats; without closedStores, the channels not open have their
// Timers and DeadLetters left at zero, which would take a read of their
// stores on disk the first time. Health judges neither.
func (t *Topic) stats(closedStores bool) TopicStats {
	fs := t.fan.Stats()
	st := TopicStats{Log: t.log.Stats(), Puts: fs.Puts, ToMemory: fs.ToMemory, ToLog: fs.ToLog, PutFailures: fs.PutFailures, KeysPending: fs.KeysPending, Duplicates: fs.Duplicates}
	open := t.chans.snapshot()
	for _, cur := range t.log.CursorStats() {
		cs := ChannelStats{Name: cur.Name, Cursor: cur}
		if cs.Cursor.Depth > 0 {
			if rec, err := t.log.ReadAt(cs.Cursor.ReadSeq); err == nil {
				cs.Lag = max(time.Since(rec.Time), 0)
			}
		}
		if oc, ok := open[cur.Name]; ok {
			cs.Open, cs.Channel, cs.Timers = true, oc.ch.Stats(), oc.timers.Depth()
			cs.DeadLetters = oc.dead.Len()
		} else if closedStores {
			cs.Timers = t.closedDepth(closedStore{cur.Name, false})
			cs.DeadLetters = t.closedDepth(closedStore{cur.Name, true})
		}
		st.Channels = append(st.Channels, cs)
	}
	return st
}

// closedDepth is the depth of store, of a channel not open, read the
// first time it is asked for and kept until the channel opens. A store
// that cannot be read counts zero, and is read again next time.
func (t *Topic) closedDepth(store closedStore) int64 {
	dir := filepath.Join(t.dir, ChannelsDir, store.name)
	if store.dead {
		dir = filepath.Join(dir, DeadDir)
	}
	return t.chans.closedDepth(store, func() (int64, bool) { return storeDepth(t.fs, dir) })
}

// storeDepth is the depth of the disk queue in dir on fsys (a closed
// channel's timer store or dead-letter store), read with a read-only view:
// a listing and the tail of its last segment. It is 0, not ok, when there
// is none (the channel never kept anything there) or it cannot be read.
func storeDepth(fsys vfs.FS, dir string) (n int64, ok bool) {
	if _, err := fsys.Stat(dir); err != nil {
		return 0, false
	}
	q, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{FS: fsys})
	if err != nil {
		return 0, false
	}
	defer q.Close()
	return q.Depth(), true
}
