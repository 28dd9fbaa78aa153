package diskqueue

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Cursor is one consumer's place in a [Log]: a read position, the
// records handed out and not yet acknowledged, and an acknowledgement
// bitmap per segment. Every cursor sees every record of the log from where
// it started, in order, at least once; cursors do not affect one another,
// except that a segment stays on disk until every cursor has acknowledged
// all of it. A Cursor is safe for concurrent use by any number of
// consumers, which share its position.
//
// Its files live in the log's directory for a [Queue]'s own cursor
// (cursor and NNNN.ack, as format v1 had them), and in cursors/NAME/ for a
// named one.
type Cursor struct {
	log    *Log
	name   string // "" for a Queue's own cursor
	dir    string // where its cursor and acknowledgement files are
	logger *slog.Logger

	// readMu guards the fields below: the consumer side.
	readMu sync.Mutex
	rd     reader // the next record Read hands out
	// ackSet is the floor, the count of acknowledgements above it, and
	// each segment's acknowledgement state and bitmap.
	ackSet
	// bitmapCache is which of the bitmaps of segs are open, and the
	// files closed owing an fsync.
	bitmapCache
	// closed is set when the log closes or the cursor is deleted: its
	// files are released.
	closed bool

	// skipped counts the records the reader passed over without handing
	// them out, unacknowledged until then (Passed).
	skipped atomic.Int64

	// ahead is a segment the reader is about to enter (the one after the
	// segment it entered last, or the one it starts in) whose files or
	// whose bitmap may not be open yet; set under readMu, taken by the
	// next Read, which opens them before it takes readMu (prepare).
	ahead atomic.Pointer[segment]
	// handed counts the records Read handed out since Open, less those
	// that left flight other than by Ack (Empty, the drop-when-full
	// policy): the records in flight are handed - acks, so Ack changes
	// one counter, not two. handed and acks are written only under readMu
	// and readable without it, as ackFloor is (ackSet).
	handed  ownedInt64
	acks    ownedInt64   // acknowledged since Open
	dropped atomic.Int64 // given up by the drop-when-full policy since Open

	// back holds the records Unread gave back, in seq order, for the next
	// Read or ReadBatch to hand out first; backN is its length, for a look
	// without backMu on the read path (unread.go).
	backMu sync.Mutex
	back   []Record
	backN  atomic.Int32

	// dropWhenFull is the cursor's policy at MaxDiskBytes
	// (SetDropWhenFull); read by producers on the full path and by the
	// writer goroutine.
	dropWhenFull atomic.Bool

	// storedPosition is the cursor file, and what was last stored in it.
	storedPosition
}

// Name returns the cursor's name ("" for a Queue's own cursor).
func (c *Cursor) Name() string { return c.name }

func (l *Log) newCursor(name string) *Cursor {
	c := &Cursor{log: l, name: name, dir: l.dir, logger: l.logger}
	c.segs = map[*segment]*segAcks{}
	c.bitmapCache = newBitmapCache(&l.opts, l.readOnly)
	if name != "" {
		c.dir = filepath.Join(l.dir, cursorsDir, name)
		c.logger = l.logger.With("cursor", name)
	}
	c.rd = reader{l: l}
	return c
}

// openCursor opens the cursor name from its cursor file. With create the
// file (and a named cursor's directory) is made if missing, and a cursor
// with no stored position starts at start, durably when openCursor
// returns; without (at Open) one whose file holds no valid position starts
// at the oldest record, delivering everything again rather than nothing.
// The caller holds l.mu, or runs in Open.
func (l *Log) openCursor(name string, start Start, create bool) (*Cursor, error) {
	c := l.newCursor(name)
	if create && name != "" && !l.readOnly {
		if err := l.fs.MkdirAll(c.dir, l.opts.dirMode); err != nil { // durable once startCursor syncs the chain
			return nil, fmt.Errorf("diskqueue: create cursor %q: %w", name, err)
		}
	}
	cur, have, err := loadCursor(l.fs, filepath.Join(c.dir, cursorName), l.opts.FileMode, l.opts.NoSync, l.readOnly)
	if cur == nil {
		return nil, fmt.Errorf("diskqueue: open cursor %q: %w", name, err)
	}
	c.file = cur
	switch {
	case errors.Is(err, ErrUnsupportedVersion):
		c.closeFiles()
		return nil, err
	case err != nil:
		c.logger.Warn("diskqueue: cursor file is damaged; rebuilding it from the segments, so acknowledged records may be delivered again", "err", err)
	}
	if have || !create {
		err = c.load(have)
	} else {
		err = l.startCursor(c, start)
	}
	if err != nil {
		c.closeFiles()
		return nil, err
	}
	return c, nil
}

// load sets up a cursor from its stored position (have says there was a
// valid one): clamped into the log, then moved over what its
// acknowledgement files say was acknowledged above it.
func (c *Cursor) load(have bool) error {
	l := c.log
	end := l.nextSeq.Load()
	readSeq := c.file.state.readSeq
	first := l.segs[0].base
	switch {
	case !have:
		readSeq = first
		if end > first {
			c.logger.Warn("diskqueue: no valid cursor; delivering again every record on disk that the acknowledgement files do not mark acknowledged", "from_seq", first)
		}
	case readSeq < first:
		// Its records were deleted after being acknowledged.
		readSeq = first
	case readSeq > end:
		// The log's end was never fsynced (under a policy that did not
		// promise it), the cursor was: what it had acknowledged is gone,
		// and it reads on from the end, where the next records go.
		c.logger.Warn("diskqueue: cursor is past the end of the log: records it had acknowledged were lost before they were fsynced (a crash or power cut; they were not promised durable); reading goes on from the end", "cursor", readSeq, "end", end)
		readSeq = end
	}
	return c.initAt(readSeq, have && readSeq == c.file.state.readSeq)
}

// initAt puts the cursor at readSeq, stores that unless stored says it
// already is, and counts the acknowledgements above it.
func (c *Cursor) initAt(readSeq uint64, stored bool) error {
	c.ackFloor.Store(readSeq)
	c.rd = reader{l: c.log, seq: readSeq}
	if !c.log.readOnly && !stored {
		if err := c.file.store(readSeq); err != nil {
			return err
		}
	}
	c.persisted = readSeq
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if err := c.loadAcks(); err != nil {
		return fmt.Errorf("diskqueue: open cursor %q: %w", c.name, err)
	}
	// Everything below the floor is acknowledged: read from it, not from
	// the stored position behind it, whose segments may go any moment.
	c.rd.seq = max(c.rd.seq, c.ackFloor.Load())
	if seg := c.log.segmentAt(c.rd.seq); seg != nil && seg.files.Load() == nil {
		c.ahead.Store(seg) // opened lazily: by the first Read, before readMu
	}
	return nil
}

// clearPastEnd clears the bits a of the active segment holds past its last
// record. A power cut leaves them: a tick fsyncs the bitmaps after the
// log, so they may hold acknowledgements of records appended after the
// log's fsync and lost with the log. Appends go on from the records it
// kept and give those seqs to new records, which must not start out
// acknowledged (a restart would count them so and never deliver them);
// the bits are cleared durably before any of them can be promised. The
// caller holds c.readMu, and l.mu as registerLocked's does.
func (c *Cursor) clearPastEnd(a *ackFile, t *tail) error {
	if a.made {
		return nil // made by this run: no bit set yet, and no scan under l.mu
	}
	cleared, err := a.clearFrom(t.end - t.seg.base)
	if err == nil && cleared && !c.log.opts.NoSync {
		err = a.f.Sync()
	}
	return err
}

// closeFiles releases the cursor's files.
func (c *Cursor) closeFiles() {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.closeFilesLocked()
}

func (c *Cursor) closeFilesLocked() {
	c.closed = true
	c.rd.forget(c.rd.seq)
	for _, f := range c.retired {
		// Retired since the writer's last round: at Close, the fsync
		// owed (Close fsyncs the acknowledgements) is still to do.
		if !c.log.opts.NoSync {
			if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
				c.logger.Warn("diskqueue: cannot fsync acknowledgements; after a power cut finished records may be delivered again", "err", err)
			}
		}
		f.Close()
	}
	c.retired = nil
	c.closeBitmaps()
	c.closeCursorFile()
}

// leaveLocked makes the cursor's reader let go of seg, which is being
// deleted, so that its mapping (and with it the file's blocks) goes with
// the deletion, not at the cursor's next Read. The reader finds its seq
// again when it next reads. The caller holds c.readMu.
func (c *Cursor) leaveLocked(seg *segment) {
	if c.rd.seg == seg {
		c.rd.forget(c.rd.seq)
	}
}

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
