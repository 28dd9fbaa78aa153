package diskqueue

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Start says where a new cursor begins: [FromNext], [FromOldest],
// [FromSeq] or [FromTime]. It is used only when the cursor is created; an
// existing cursor goes on from where it was.
type Start struct {
	kind startKind
	seq  uint64
	t    time.Time
}

type startKind uint8

const (
	startNext startKind = iota
	startOldest
	startSeq
	startTime
)

// FromNext starts a cursor at the next record put (nsqd's behaviour for a
// new channel): nothing already in the log is delivered to it.
func FromNext() Start { return Start{kind: startNext} }

// FromOldest starts a cursor at the oldest record still on disk.
func FromOldest() Start { return Start{kind: startOldest} }

// FromSeq starts a cursor at seq: a seq older than the oldest record on
// disk starts at that record, one past the end at the next record put.
func FromSeq(seq uint64) Start { return Start{kind: startSeq, seq: seq} }

// FromTime starts a cursor at the first record stored at or after t (see
// [Log.SeekTime]), or at the next record put if there is none.
func FromTime(t time.Time) Start { return Start{kind: startTime, t: t} }

// startCursor puts a new cursor at start and makes it durable: its
// position stored, its directory entries fsynced.
func (l *Log) startCursor(c *Cursor, start Start) error {
	seq, err := l.startSeq(start)
	if err != nil {
		return err
	}
	if c.name == "" && seq < l.nextSeq.Load() && len(l.cursors) == 0 {
		c.logger.Warn("diskqueue: no valid cursor; delivering every record on disk again", "from_seq", seq)
	}
	if err := c.initAt(seq, false); err != nil {
		return err
	}
	if l.readOnly || l.opts.NoSync {
		return nil
	}
	dirs := []string{c.dir}
	if c.name != "" {
		dirs = append(dirs, filepath.Join(l.dir, cursorsDir), l.dir)
	}
	for _, d := range dirs {
		if err := l.fs.SyncDir(d); err != nil {
			return fmt.Errorf("diskqueue: create cursor %q: fsync %s: %w", c.name, d, err)
		}
	}
	return nil
}

// startSeq turns a Start into a seq inside the log.
func (l *Log) startSeq(s Start) (uint64, error) {
	end := l.nextSeq.Load()
	switch s.kind {
	case startOldest:
		return l.firstLiveSeq(), nil
	case startSeq:
		return min(max(s.seq, l.firstLiveSeq()), end), nil
	case startTime:
		seq, err := l.SeekTime(s.t)
		if errors.Is(err, ErrNotFound) {
			return end, nil
		}
		return seq, err
	}
	return end, nil
}

// firstLiveSeq is the oldest record on disk: the first segment's base, or
// the end of the log when there is no record.
func (l *Log) firstLiveSeq() uint64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	for _, s := range l.segs {
		if !s.gone.Load() && s.endNow() > max(s.base, s.keptFrom.Load()) {
			return max(s.base, s.keptFrom.Load())
		}
	}
	return l.nextSeq.Load()
}
