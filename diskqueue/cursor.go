package diskqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	// ackedMax is the highest seq acknowledged (at Open: an upper bound of
	// those acknowledged before). Read checks the bitmap only for records
	// at or below it: in a steady run acks trail the reader and it costs
	// nothing.
	ackedMax uint64
	// segs is the cursor's acknowledgement state of each segment it has
	// touched (opened on first use); lastAcked caches the one the last Ack
	// landed in, lastRead the one of the segment the last Read read.
	segs      map[*segment]*segAcks
	lastAcked *segAcks
	lastRead  *segAcks
	// open are the states whose bitmap may be open (closeFarBitmaps keeps
	// it to those needed); sweepAt is the length past which it looks next.
	open    []*segAcks
	sweepAt int
	// syncing is set while syncAcks fsyncs files it took from segs
	// outside readMu: a bitmap closed meanwhile goes to retired, so its
	// fsync is still done, before the close.
	syncing bool
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
	// newFiles says bitmap files were created (or renamed into place) in
	// dir since syncAcks last fsynced it: until then a power cut may lose
	// their names, and so the acknowledgements in them.
	newFiles atomic.Bool
	// passed are segments the floor passed while they were still being
	// sealed, whose bitmaps retirePassed retires once they are.
	passed []*segAcks
	// retired are bitmap files of segments the floor has passed, waiting
	// for the writer goroutine to fsync and close them (retirePassed).
	retired []file

	// Written only under readMu, readable without it (Depth, Stats, the
	// writer goroutine's housekeeping). Read and the in-order Ack change
	// ackFloor, handed and acks with plain stores (owned.go): a locked
	// instruction for each was a tenth of a drain's time.
	ackFloor ownedUint64 // oldest record not yet acknowledged
	// ackedAbove counts acknowledged records above ackFloor (acked out of
	// order, or before a restart ahead of the floor).
	ackedAbove atomic.Int64
	// handed counts the records Read handed out since Open, less those
	// that left flight other than by Ack (Empty, the drop-when-full
	// policy): the records in flight are handed - acks, so Ack changes
	// one counter, not two.
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

	// The cursor file, touched only by the writer goroutine once the
	// cursor is registered with the log (and before that by whoever
	// creates it, and by Close once the writer has returned).
	file        *cursorFile
	persisted   uint64    // readSeq last stored in the cursor file
	persistedAt time.Time // when
	persistErr  error     // the first failure to store it, for Close
}

// segAcks is a cursor's acknowledgement state of one segment.
type segAcks struct {
	seg *segment
	ack *ackFile // nil until opened
	// acked counts the segment's acknowledged records, once ack is open
	// (or the floor has passed the segment).
	acked int64
	// known is an end of seg seen earlier: the records below it exist.
	// Ack goes by it and loads the segment's extent, which every Put
	// stores, only for a seq at or past it, so that acknowledging keeps
	// off the producer's cache line.
	known uint64
	// listed says the state is in the cursor's open list; passed, that
	// it is in Cursor.passed (under readMu).
	listed, passed bool
}

// holds reports whether seq, at or above seg's base, is one of seg's
// records.
func (sa *segAcks) holds(seq uint64) bool {
	if seq < sa.known {
		return true
	}
	sa.known = sa.seg.endNow()
	return seq < sa.known
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

// cursorsDir is the directory of named cursors, in the log's directory.
const cursorsDir = "cursors"

// ErrBadCursorName is returned for a cursor name that is empty, longer
// than 64 bytes, or has a byte other than ASCII letters, digits, '.', '_'
// and '-' (or is "." or "..").
var ErrBadCursorName = errors.New("diskqueue: bad cursor name")

func checkCursorName(name string) error {
	if name == "" || len(name) > 64 || name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrBadCursorName, name)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return fmt.Errorf("%w: %q", ErrBadCursorName, name)
		}
	}
	return nil
}

// Name returns the cursor's name ("" for a Queue's own cursor).
func (c *Cursor) Name() string { return c.name }

// Cursor returns the named cursor, creating it at start if it does not
// exist yet. A created cursor is durable when Cursor returns: it survives a
// crash and is opened with the log from then on.
func (l *Log) Cursor(name string, start Start) (*Cursor, error) {
	if err := checkCursorName(name); err != nil {
		return nil, err
	}
	return l.cursor(name, start)
}

// Cursors returns the names of the log's cursors, sorted.
func (l *Log) Cursors() []string {
	var names []string
	for _, c := range *l.cursorList.Load() {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}

// cursor returns the named cursor ("" is a Queue's own), opening or
// creating it.
func (l *Log) cursor(name string, start Start) (*Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	for _, c := range l.cursors {
		if c.name == name {
			return c, nil
		}
	}
	if l.readOnly && name != "" {
		return nil, fmt.Errorf("%w: cursor %q does not exist", ErrNotFound, name)
	}
	c, err := l.openCursor(name, start, true)
	if err != nil {
		return nil, err
	}
	if err := l.registerLocked(c); err != nil {
		c.closeFiles()
		return nil, err
	}
	return c, nil
}

func (l *Log) newCursor(name string) *Cursor {
	c := &Cursor{log: l, name: name, dir: l.dir, logger: l.logger, segs: map[*segment]*segAcks{}}
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
		if err := l.fs.MkdirAll(c.dir, l.opts.dirMode); err != nil {
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

// loadCursors opens the cursors stored with the log at Open: its own
// (if the directory has a cursor file) and the named ones. They are all
// known before the writer goroutine starts, so housekeeping never deletes
// a segment a cursor not yet asked for still needs.
func (l *Log) loadCursors() error {
	var names []string
	if _, ok := l.listing[cursorName]; ok {
		names = append(names, "")
	}
	entries, err := l.fs.ReadDir(filepath.Join(l.dir, cursorsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("diskqueue: open: list cursors: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || checkCursorName(e.Name()) != nil {
			l.logger.Warn("diskqueue: leaving an unknown entry in the cursors directory alone", "name", e.Name())
			continue
		}
		dir := filepath.Join(l.dir, cursorsDir, e.Name())
		if _, err := l.fs.Stat(filepath.Join(dir, cursorName)); errors.Is(err, fs.ErrNotExist) {
			// Its creation or deletion was cut short by a crash.
			if !l.readOnly {
				if err := l.removeCursorDir(dir); err != nil {
					l.logger.Warn("diskqueue: cannot remove a cursor directory without a cursor file", "dir", dir, "err", err)
				}
			}
			continue
		}
		names = append(names, e.Name())
	}
	for _, name := range names {
		c, err := l.openCursor(name, Start{}, false)
		if err != nil {
			return err
		}
		if name != "" && !l.readOnly {
			l.removeOrphanBitmaps(c)
		}
		if err := l.registerLocked(c); err != nil {
			c.closeFiles()
			return err
		}
	}
	return nil
}

// removeOrphanBitmaps removes a named cursor's acknowledgement files of
// segments no longer in the log (a crash came between a segment's deletion
// and theirs, or a power cut lost the segment: dropLostTail) and its
// bitmap of a spare segment. The removals are made durable at once: the
// seqs of a lost segment go on, and a new segment of its base gets a
// bitmap whose name only the next syncAcks makes durable, so a power cut
// before that would bring the old one back beside the new log.
func (l *Log) removeOrphanBitmaps(c *Cursor) {
	entries, err := l.fs.ReadDir(c.dir)
	if err != nil {
		return
	}
	live := map[uint64]bool{}
	for _, s := range l.segs {
		if !s.gone.Load() {
			live[s.base] = true
		}
	}
	removed := false
	for _, e := range entries {
		base, ok := parseSegmentName(e.Name(), ackSuffix)
		if e.Name() != spareName+ackSuffix && (!ok || live[base]) {
			continue
		}
		if err := l.fs.Remove(filepath.Join(c.dir, e.Name())); err != nil {
			c.logger.Warn("diskqueue: cannot remove the acknowledgement file of a deleted segment", "file", e.Name(), "err", err)
			continue
		}
		removed = true
	}
	if removed && !l.opts.NoSync {
		if err := l.fs.SyncDir(c.dir); err != nil {
			c.logger.Warn("diskqueue: cannot fsync the directory of removed acknowledgement files", "err", err)
		}
	}
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

// registerLocked adds c to the log's cursors, with its bitmap of the
// active segment among those appends grow. The caller holds l.mu.
func (l *Log) registerLocked(c *Cursor) error {
	if t := l.t; t != nil {
		c.readMu.Lock()
		a, err := c.ackFor(t.seg)
		if err == nil && !l.readOnly {
			err = c.clearPastEnd(a, t)
		}
		c.readMu.Unlock()
		if err != nil {
			return fmt.Errorf("diskqueue: open cursor %q: %w", c.name, err)
		}
		t.acks = append(t.acks, a)
		t.ackCap = min(t.ackCap, a.cap)
	}
	l.cursors = append(l.cursors, c)
	list := slices.Clone(l.cursors)
	l.cursorList.Store(&list)
	l.countBitmapsLocked(1)
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

// countBitmapsLocked changes the number of acknowledgement files each
// segment is counted with in the disk usage by delta. The caller holds
// l.mu.
func (l *Log) countBitmapsLocked(delta int32) {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	for _, s := range l.segs {
		prev := s.diskBytes()
		s.bitmaps.Add(delta)
		l.diskBytes.Add(s.diskBytes() - prev)
	}
}

// DeleteCursor removes the named cursor and its files. Segments that only
// it still needed are deleted by the writer goroutine's next round. It
// returns [ErrNotFound] for a cursor that does not exist.
func (l *Log) DeleteCursor(name string) error {
	if err := checkCursorName(name); err != nil {
		return err
	}
	if l.readOnly {
		return ErrReadOnly
	}
	return l.request(func() error { return l.deleteCursor(name) })
}

// deleteCursor runs on the writer goroutine, so no seal is using the
// cursor's bitmap files meanwhile.
func (l *Log) deleteCursor(name string) error {
	c, err := l.takeOut(name)
	if err != nil {
		return err
	}
	// The cursor file goes first: a directory without one is a deletion a
	// crash interrupted, which the next Open finishes.
	if err := l.fs.Remove(filepath.Join(c.dir, cursorName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("diskqueue: delete cursor %q: %w", name, err)
	}
	if err := l.removeCursorDir(c.dir); err != nil {
		return fmt.Errorf("diskqueue: delete cursor %q: %w", name, err)
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(filepath.Join(l.dir, cursorsDir)); err != nil {
			return fmt.Errorf("diskqueue: delete cursor %q: %w", name, err)
		}
	}
	l.wake()
	return nil
}

// takeOut unregisters the named cursor and closes its files, for a
// deletion or a reset on the writer goroutine.
func (l *Log) takeOut(name string) (*Cursor, error) {
	l.mu.Lock()
	c, err := l.unregisterLocked(name)
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c.closeFiles()
	return c, nil
}

// unregisterLocked takes the named cursor out of the log: no append grows
// its bitmaps and no housekeeping waits for it from now on. The caller
// holds l.mu, runs on the writer goroutine, and closes the cursor's files.
func (l *Log) unregisterLocked(name string) (*Cursor, error) {
	i := slices.IndexFunc(l.cursors, func(c *Cursor) bool { return c.name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: cursor %q", ErrNotFound, name)
	}
	c := l.cursors[i]
	l.cursors = slices.Delete(slices.Clone(l.cursors), i, i+1)
	list := slices.Clone(l.cursors)
	l.cursorList.Store(&list)
	for _, t := range append([]*tail{l.t}, l.sealQ...) {
		if t == nil {
			continue
		}
		t.acks = slices.DeleteFunc(t.acks, func(a *ackFile) bool { return a.owner == c })
	}
	l.countBitmapsLocked(-1)
	return c, nil
}

// removeCursorDir removes a cursor's directory whose cursor file is gone.
func (l *Log) removeCursorDir(dir string) error {
	entries, err := l.fs.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if err := l.fs.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := l.fs.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
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
	for _, sa := range c.segs {
		if sa.ack != nil {
			sa.ack.close()
			sa.ack = nil
		}
	}
	if c.file != nil && c.file.f != nil {
		c.file.close()
		c.file.f = nil
	}
}

// state returns the cursor's acknowledgement state of seg, making it on
// first use. The caller holds c.readMu.
func (c *Cursor) state(seg *segment) *segAcks {
	sa := c.segs[seg]
	if sa == nil {
		sa = &segAcks{seg: seg}
		if end := seg.endNow(); seg.gone.Load() || end <= c.ackFloor.Load() {
			sa.acked = int64(end - seg.base)
		}
		c.segs[seg] = sa
	}
	return sa
}

// installLocked makes a the cursor's open bitmap of sa's segment, and lists
// sa among the open ones (track). The caller holds c.readMu.
func (c *Cursor) installLocked(sa *segAcks, a *ackFile) {
	a.owner = c
	sa.ack = a
	c.track(sa)
}

// maxOpenBitmaps is how many of a cursor's acknowledgement files may be
// open before closeFarBitmaps looks for those it can close: of sealed
// segments away from the read position with no record in flight. Those
// of segments being written, at the read position or with records in
// flight stay open beyond it.
const maxOpenBitmaps = 32

// track lists sa, whose bitmap is open or about to be. A list grown past
// where closeFarBitmaps should look wakes the writer goroutine, whose
// round does: a rotation lists the new segment's state under the log's
// mu, which should not wait for closes. A read-only view's bitmaps are
// copies in memory, never closed, so they are not listed. The caller
// holds c.readMu.
func (c *Cursor) track(sa *segAcks) {
	if sa.listed || c.log.readOnly {
		return
	}
	sa.listed = true
	c.open = append(c.open, sa)
	if len(c.open) == c.sweepLimit()+1 {
		c.log.wake()
	}
}

func (c *Cursor) sweepLimit() int { return max(c.openLimit(), c.sweepAt) }

func (c *Cursor) openLimit() int {
	if n := c.log.opts.openBitmapsForTesting; n > 0 {
		return n
	}
	return maxOpenBitmaps
}

// closeFarBitmapsLocked closes the bitmaps the cursor does not need open
// (bitmapNeeded) once more than sweepLimit are listed; their bits are in
// the files, and ackFor opens them again on use. One owing an fsync goes
// to retired, as the floor's passing would send it (shelve). The writer
// goroutine runs it each round (retirePassed), and ackFor before it opens
// another, so a reader, an Unacknowledged or Open's count (loadAcks)
// walking many segments between two rounds does not open them all. The caller holds c.readMu and uses
// no bitmap it had before the call.
func (c *Cursor) closeFarBitmapsLocked() {
	if len(c.open) <= c.sweepLimit() {
		return
	}
	floor, next := c.ackFloor.Load(), c.rd.seq
	at := c.log.segmentAt(next)
	var after *segment
	if at != nil {
		after = c.log.segmentAfter(at)
	}
	kept := c.open[:0]
	for _, sa := range c.open {
		switch {
		case sa.ack == nil || c.segs[sa.seg] != sa:
			sa.listed = false // closed, or the segment left the log
		case c.bitmapNeeded(sa, floor, next, at, after):
			kept = append(kept, sa)
		default:
			c.shelve(sa)
			sa.listed = false
		}
	}
	clear(c.open[len(kept):])
	c.open = kept
	// Those kept are looked at again once the bound's worth more are
	// listed, so a cursor with many segments in flight walks them once
	// per that many opens, not each round.
	c.sweepAt = len(kept) + c.openLimit()
}

// bitmapNeeded reports whether the cursor keeps sa's bitmap open: its
// segment is being written or sealed (appends grow the file and the seal
// cuts it), the reader is in it or about to enter it (at, after: the
// segment of next, the next record Read hands out, and the one after), the
// last Read or Ack used it, or it may hold records in flight. Those lie
// in [floor, next): a segment past next, or every record of which is
// acknowledged, holds none. A read-only view's bitmaps, in memory only,
// are never closed (nor listed).
func (c *Cursor) bitmapNeeded(sa *segAcks, floor, next uint64, at, after *segment) bool {
	seg := sa.seg
	switch {
	case sa.ack.mem || !seg.sealed.Load() || seg.writing.Load():
		return true
	case seg == c.rd.seg || seg == at || seg == after || sa == c.lastRead || sa == c.lastAcked:
		return true
	}
	end := seg.endNow()
	return seg.base < next && end > floor && sa.acked < int64(end-seg.base)
}

// retire closes the cursor's bitmap of a segment its floor has passed:
// nothing in it changes again, so a long retained log does not hold a
// descriptor and a mapping per segment per cursor. One with bits not yet
// fsynced goes to the writer goroutine (retirePassed), which fsyncs and
// then closes it, so a power
// cut loses no more than it would have. A segment still being written or
// sealed keeps its file (the writer cuts it to size). The caller holds
// c.readMu.
func (c *Cursor) retire(sa *segAcks) {
	if sa == nil || sa.ack == nil || sa.ack.mem {
		return
	}
	if sa.seg.writing.Load() {
		// For retirePassed, once sealed; once: a consumer that keeps up
		// brings the floor to the end of the segment being written at
		// every Ack, and the list grew by one each time (and took
		// every writer round longer), until the segment was sealed.
		if !sa.passed {
			sa.passed = true
			c.passed = append(c.passed, sa)
		}
		return
	}
	c.shelve(sa)
}

// shelve closes sa's bitmap, or hands it to the writer goroutine to fsync
// and close (retired) if bits set since the last fsync may not be durable
// yet: it is dirty, or syncAcks is fsyncing it now. The caller holds
// c.readMu.
func (c *Cursor) shelve(sa *segAcks) {
	a := sa.ack
	sa.ack = nil
	a.release()
	if (a.dirty || c.syncing) && !c.log.opts.NoSync {
		c.retired = append(c.retired, a.f)
		return
	}
	a.f.Close()
}

// retirePassed retires the bitmaps of segments the floor has passed that
// were still being sealed when it did (c.passed, not a walk of every
// segment), closes those far from the read position
// (closeFarBitmapsLocked), then fsyncs and closes every retired file
// (their directory first, if bitmaps were made in it since it last was).
// The writer goroutine calls it each round.
func (c *Cursor) retirePassed() {
	c.readMu.Lock()
	passed := c.passed
	c.passed = nil
	for _, sa := range passed {
		sa.passed = false
		c.retire(sa) // those still being sealed go back on the list
	}
	c.closeFarBitmapsLocked()
	retired := c.retired
	c.retired = nil
	c.readMu.Unlock()
	// The names first, as syncAcks does: a bitmap made since the last
	// syncAcks is not in the directory on disk yet.
	if len(retired) > 0 && c.newFiles.Swap(false) {
		if err := c.log.fs.SyncDir(c.dir); err != nil {
			c.newFiles.Store(true) // try again next time
			c.logger.Warn("diskqueue: cannot fsync the directory of new acknowledgement files; after a power cut finished records may be delivered again", "err", err)
		}
	}
	for _, f := range retired {
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			c.logger.Warn("diskqueue: cannot fsync acknowledgements; after a power cut finished records may be delivered again", "err", err)
		}
		f.Close()
	}
}

// closeBitmap closes the cursor's acknowledgement file of seg, keeping
// what it counted.
func (c *Cursor) closeBitmap(seg *segment) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.leaveLocked(seg)
	if sa := c.segs[seg]; sa != nil && sa.ack != nil {
		sa.ack.close()
		sa.ack = nil
	}
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

// forget drops the cursor's state of a segment leaving the log, closing
// its bitmap file.
func (c *Cursor) forget(seg *segment) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.leaveLocked(seg)
	if sa := c.segs[seg]; sa != nil {
		if sa.ack != nil {
			sa.ack.close()
			sa.ack = nil
		}
		delete(c.segs, seg)
		if c.lastAcked == sa {
			c.lastAcked = nil
		}
		if c.lastRead == sa {
			c.lastRead = nil
		}
	}
}

// done reports, for each of segs, whether the cursor has acknowledged
// every record in it.
func (c *Cursor) done(segs []*segment) []bool {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	floor := c.ackFloor.Load()
	out := make([]bool, len(segs))
	for i, s := range segs {
		end := s.endNow()
		if end <= floor || s.gone.Load() {
			out[i] = true
			continue
		}
		if sa := c.segs[s]; sa != nil && sa.acked >= int64(end-s.base) {
			out[i] = true
		}
	}
	return out
}

// floorPosition is where the floor is, as far as memory tells: the
// reader's position when everything read is acknowledged, a segment's
// start, or the write position at the end; otherwise the floor's segment
// with Offset -1.
func (c *Cursor) floorPosition(writePos Position) Position {
	floor := c.ackFloor.Load()
	c.readMu.Lock()
	rd := c.rd
	c.readMu.Unlock()
	if rd.seg != nil && rd.seq == floor && !rd.seg.gone.Load() {
		return Position{Segment: rd.seg.base, Offset: rd.off}
	}
	if floor >= c.log.nextSeq.Load() {
		return writePos
	}
	seg := c.log.segmentAt(floor)
	switch {
	case seg == nil:
		return writePos
	case seg.base == floor:
		return Position{Segment: seg.base, Offset: fileHeaderSize}
	}
	return Position{Segment: seg.base, Offset: -1}
}

// CursorStats is a snapshot of one cursor.
type CursorStats struct {
	Name string
	// Depth is the records not yet acknowledged: the log's WriteSeq -
	// ReadSeq, less those above ReadSeq acknowledged out of order (see
	// [Cursor.Depth] for records compaction removed).
	Depth int64
	// InFlight is the records handed out by Read and not yet acknowledged.
	InFlight int64
	// ReadSeq is the oldest record not yet acknowledged.
	ReadSeq uint64
	// Acks counts the records acknowledged since Open.
	Acks int64
	// Dropped counts the records given up unacknowledged since Open
	// because the cursor was set to drop when full
	// ([Cursor.SetDropWhenFull]) and the log reached MaxDiskBytes.
	Dropped int64
	// DropWhenFull says the cursor is set to drop when full: it does not
	// hold the log's space at MaxDiskBytes.
	DropWhenFull bool
}

// Stats returns a snapshot of the cursor. It takes no lock and does no I/O.
func (c *Cursor) Stats() CursorStats {
	// acks before handed: every Ack follows its Read, so the difference
	// is never below zero however the two race.
	acks := c.acks.Load()
	return CursorStats{
		Name:     c.name,
		Depth:    c.Depth(),
		InFlight: c.handed.Load() - acks,
		ReadSeq:  c.ackFloor.Load(),
		Acks:     acks,
		Dropped:  c.dropped.Load(),

		DropWhenFull: c.dropWhenFull.Load(),
	}
}

// ackCapacity is how many records seg's bitmap must have room for: those
// it holds, and for the segment being written as many as it can take.
func (c *Cursor) ackCapacity(seg *segment) uint64 {
	capacity := seg.endNow() - seg.base
	if seg.writing.Load() {
		capacity = max(capacity, c.log.recordCapacity())
	}
	return capacity
}

// ackFor returns the cursor's acknowledgement file of seg, opening it on
// first use, or creating it for a segment written before acknowledgement
// files existed (format v1), one written before the cursor was, or one
// whose file is damaged (its acknowledgements above the floor are then
// delivered again: at-least-once). The caller holds c.readMu.
func (c *Cursor) ackFor(seg *segment) (*ackFile, error) {
	sa := c.state(seg)
	if sa.ack != nil {
		return sa.ack, nil
	}
	if c.closed {
		return nil, ErrClosed
	}
	if seg.gone.Load() {
		return nil, fmt.Errorf("%w: segment %d was acknowledged and deleted", ErrNotFound, seg.base)
	}
	c.closeFarBitmapsLocked()
	capacity := c.ackCapacity(seg)
	a, flags, err := c.openAckFile(seg, capacity)
	switch {
	case err == nil && flags&ackGone != 0:
		// A tombstone beside a log that still exists: a crash came while
		// the segment was being deleted. Every record was acknowledged.
		a.close()
		return nil, fmt.Errorf("%w: segment %d was acknowledged and is being deleted", ErrNotFound, seg.base)
	case err == nil:
	case c.log.readOnly:
		// Nothing to read the bits from: start from none.
		a = memAckFile(c.ackPath(seg), seg.base, capacity, nil)
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrCorrupt):
		if !errors.Is(err, os.ErrNotExist) {
			c.logger.Warn("diskqueue: acknowledgement file is damaged; its records above the read cursor are delivered again", "segment", seg.base, "err", err)
		}
		if a, err = c.createAckFile(seg, capacity, c.log.mapped, seg.writing.Load()); err != nil {
			if isNoSpace(err) {
				return nil, fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
			return nil, err
		}
		// Made for a segment being written (grow), it is preallocated to
		// one allocUnit: its records already there may need more, and the
		// next Put's reserve may be far off. Not yet installed, it is
		// nobody else's to grow.
		if err := a.ensure(ackFileSize(seg.endNow() - seg.base)); err != nil {
			a.close()
			return nil, fmt.Errorf("diskqueue: grow %s: %w", a.name, err)
		}
	default:
		return nil, err
	}
	c.installLocked(sa, a)
	return a, nil
}

// ackPath is the cursor's acknowledgement file of seg.
func (c *Cursor) ackPath(seg *segment) string {
	return filepath.Join(c.dir, segmentName(seg.base, ackSuffix))
}

// advanceFloorLocked moves the floor (the oldest unacknowledged record)
// over every acknowledged record it now touches, segment by segment. hint,
// if not nil, is the segment the floor is likely in. The caller holds
// c.readMu.
func (c *Cursor) advanceFloorLocked(hint *segment) error {
	floor := c.ackFloor.Load()
	crossed := false // the floor left a segment: it may be deletable now
	var err error
	for {
		// Bounded by the segments' published ends, which nextSeq is the
		// last of (read through the last segment, which a rotation
		// replaces): the segment in hand says where its records end.
		seg := hint
		hint = nil
		if seg == nil || floor < seg.base || floor >= seg.endNow() {
			seg = c.log.segmentAt(floor)
		}
		if seg == nil {
			break
		}
		segEnd := seg.endNow()
		if seg.gone.Load() {
			c.ackedAbove.Add(-int64(segEnd - floor))
			floor, crossed = segEnd, true
			continue
		}
		var a *ackFile
		if a, err = c.ackFor(seg); err != nil {
			break
		}
		var j uint64
		if j, err = a.firstClear(floor-seg.base, segEnd-seg.base); err != nil {
			break
		}
		next := seg.base + j
		c.ackedAbove.Add(-int64(next - floor))
		floor = next
		if next < segEnd {
			break
		}
		crossed = crossed || seg.sealed.Load()
		c.retire(c.segs[seg])
	}
	if floor != c.ackFloor.Load() {
		c.ackFloor.Store(floor)
		if crossed {
			c.log.wake()
		}
	}
	return err
}

// markAckedLocked acknowledges seq, which was handed out, in seg. It
// reports whether seq already was acknowledged (then nothing changes). The
// caller holds c.readMu.
func (c *Cursor) markAckedLocked(sa *segAcks, seq uint64) (bool, error) {
	seg := sa.seg
	a := sa.ack // Ack has the state already: no second map lookup
	if a == nil {
		var err error
		if a, err = c.ackFor(seg); err != nil {
			return false, err
		}
	}
	set := false
	if seq == c.ackFloor.Load() {
		// In order, the common case: when the next record is not
		// acknowledged yet the floor steps over this one alone, with no
		// round trip through ackedAbove and no scan of the bitmap. The
		// next record is in the same segment, so no segment is done.
		sa.holds(seq + 1) // raises known past seq+1 if that record exists
		was, nextSet, ok, err := a.setAtFloor(seq-seg.base, sa.known-seg.base)
		if ok && (err != nil || was) {
			return was, err
		}
		if ok && !nextSet {
			c.ackedMax = max(c.ackedMax, seq)
			sa.acked++
			c.ackFloor.storeOwned(seq + 1)
			return false, nil
		}
		set = ok
	}
	if !set {
		if was, err := a.testAndSet(seq - seg.base); err != nil || was {
			return was, err
		}
	}
	c.ackedMax = max(c.ackedMax, seq)
	c.ackedAbove.Add(1)
	sa.acked++
	// Sealed first: the active segment's end is the line every Put stores.
	if seg.sealed.Load() && sa.acked >= int64(seg.endNow()-seg.base) {
		c.log.wake() // the whole segment may go
	}
	if seq == c.ackFloor.Load() {
		// The acknowledgement is recorded; a floor that cannot move now
		// (a failed read of the next segment's bitmap) moves on a later one.
		if err := c.advanceFloorLocked(seg); err != nil {
			c.logger.Warn("diskqueue: cannot advance the read cursor yet", "seq", seq, "err", err)
		}
	}
	return false, nil
}

// loadAcks runs when the cursor is opened, once its floor is known: it
// opens the acknowledgement files from the floor on, counts the records
// acknowledged above it (only up to each file's readEnd: nothing past it
// was ever handed out, so Open reads no more than the last run's reading
// reached), and moves the floor over them. The caller holds c.readMu.
func (c *Cursor) loadAcks() error {
	floor := c.ackFloor.Load()
	c.log.segMu.RLock()
	segs := c.log.segs
	c.log.segMu.RUnlock()
	// stop: past the first bitmap that says its segment was never read,
	// where a bitmap is opened only if its header says it was (wasRead).
	stop := false
	for _, seg := range segs {
		end := seg.endNow()
		if end <= floor {
			continue // state counts it acknowledged
		}
		if stop && !seg.gone.Load() && !c.wasRead(seg) {
			continue
		}
		sa := c.state(seg)
		if seg.gone.Load() {
			c.ackedAbove.Add(int64(end - max(floor, seg.base)))
			c.ackedMax = max(c.ackedMax, end-1)
			continue
		}
		a, err := c.ackFor(seg)
		if err != nil {
			return err
		}
		lo := max(floor, seg.base)
		hi := min(a.readEnd, end)
		if hi <= lo {
			sa.acked = int64(lo - seg.base)
			if a.readEnd <= seg.base && !a.made {
				// Never read, it says: the later ones are mostly not
				// either, and each is opened only if it says it was
				// (wasRead). (A file made now, its old one lost or
				// damaged, tells nothing.)
				stop = true
			}
			continue
		}
		n, err := a.countSet(lo-seg.base, hi-seg.base)
		if err != nil {
			return err
		}
		sa.acked = int64(lo-seg.base) + n
		c.ackedAbove.Add(n)
		if n > 0 {
			c.ackedMax = max(c.ackedMax, hi-1)
		}
	}
	return c.advanceFloorLocked(nil)
}

// wasRead reports whether the cursor's bitmap of seg exists and says some
// of seg was handed out (readEnd past its base), reading its header alone:
// loadAcks asks it of the segments past the first bitmap that says it was
// never read. Bitmaps reach the disk in no order a power cut respects
// (syncAcks fsyncs oldest first, but the kernel writes a dirty mapped page
// back when it likes, and a round fsyncs retired ones first), so a later
// bitmap can be durable with bits set while an earlier one's raised
// readEnd was lost; left uncounted, those records were delivered again,
// their Acks refused as already acknowledged, and Depth never came back to
// 0. A bitmap missing, never written or damaged counts as not read: what
// it held is delivered again, as ackFor does with it.
func (c *Cursor) wasRead(seg *segment) bool {
	head, err := readHead(c.log.fs, c.ackPath(seg), ackHeaderSize)
	if err != nil || len(head) < ackHeaderSize {
		return false
	}
	readEnd, _, err := decodeAckHeader(head, seg.base)
	return err == nil && readEnd > seg.base
}

// syncAcks fsyncs the acknowledgement files changed since the last call,
// so a power cut loses at most the acknowledgements of one SyncInterval.
// Under the default policy that is the same bound as for the records.
// First it closes the bitmaps the cursor no longer needs open, whatever
// sweepAt says.
func (c *Cursor) syncAcks() {
	c.readMu.Lock()
	if len(c.open) > c.openLimit() {
		// Bitmaps kept for records in flight that have all been
		// acknowledged since are closed here, at the latest, when no
		// other bitmap opened since (sweepAt) has had the list looked at.
		c.sweepAt = 0
		c.closeFarBitmapsLocked()
	}
	c.readMu.Unlock()
	if c.log.opts.NoSync || c.log.readOnly {
		return
	}
	type dirty struct {
		base uint64
		f    file
	}
	var todo []dirty
	c.readMu.Lock()
	for seg, sa := range c.segs {
		if a := sa.ack; a != nil && a.dirty && !a.mem {
			a.dirty = false
			todo = append(todo, dirty{seg.base, a.f})
		}
	}
	c.syncing = len(todo) > 0
	c.readMu.Unlock()
	defer func() {
		c.readMu.Lock()
		c.syncing = false
		c.readMu.Unlock()
	}()
	// Oldest first. Open does not depend on the order (the kernel writes
	// mapped pages back in its own): see wasRead.
	slices.SortFunc(todo, func(a, b dirty) int { return cmp.Compare(a.base, b.base) })
	files := make([]file, len(todo))
	for i, d := range todo {
		files[i] = d.f
	}
	// The names first: a bitmap's fsync then makes it durable whole.
	if c.newFiles.Swap(false) {
		if err := c.log.fs.SyncDir(c.dir); err != nil {
			c.newFiles.Store(true) // try again next time
			c.logger.Warn("diskqueue: cannot fsync the directory of new acknowledgement files; after a power cut finished records may be delivered again", "err", err)
		}
	}
	for _, f := range files {
		// A segment deleted meanwhile has closed its file: nothing to keep.
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			c.logger.Warn("diskqueue: cannot fsync acknowledgements; after a power cut finished records may be delivered again", "err", err)
		}
	}
}

// Depth returns the number of records put and not yet acknowledged by this
// cursor, including those handed out by Read and still in flight. A record
// [Log.Compact] removed before the cursor read it counts until Read passes
// over it (Read does so without waiting, counting it acknowledged).
func (c *Cursor) Depth() int64 {
	return int64(c.log.nextSeq.Load()-c.ackFloor.Load()) - c.ackedAbove.Load()
}

// Read returns the cursor's next record in order, waiting for one if there
// is none until ctx ends or the log closes. The record is in flight until
// [Cursor.Ack] acknowledges it; records never acknowledged are delivered
// again after the log is reopened, so delivery is at-least-once.
//
// With a ctx that is already done, Read does not wait: it returns a record
// that is ready, or ctx.Err().
//
// Records whose bytes fail their checks are never returned: Read skips
// them, copies their bytes to a .bad file, logs a warning and counts them in
// [Stats].CorruptRecords. Records [Log.Compact] removed are passed over
// too, and counted acknowledged for this cursor (not in Acks). An I/O error is returned as is and the same
// record is tried again by the next Read. After [Log.DeleteCursor] Read
// returns [ErrClosed].
func (c *Cursor) Read(ctx context.Context) (rec Record, err error) {
	if c.backN.Load() > 0 {
		var one [1]Record
		if c.readBack(one[:]) > 0 {
			return one[0], nil
		}
	}
	for {
		seq, ts, body, err := c.tryRead()
		if err == nil {
			// Field by field: a Record built whole is built aside and
			// copied over in wider loads than its stores.
			rec.Seq, rec.Time, rec.Body = seq, time.Unix(0, ts), body
			return rec, nil
		}
		if err != errNoData {
			return Record{}, err
		}
		wait := c.log.written.Wait()
		// Look again now that we are registered for the next write, so a
		// write between the two is not missed.
		if seq, ts, body, err = c.tryRead(); err == nil {
			rec.Seq, rec.Time, rec.Body = seq, time.Unix(0, ts), body
			return rec, nil
		} else if err != errNoData {
			return Record{}, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		case <-c.log.closeCh:
			return Record{}, ErrClosed
		}
	}
}

// makeRead is the Record of a read's fields. The layers of a Read pass
// the fields apart, in registers, and only Read and ReadBatch put them
// together: a Record is too large for the compiler to keep out of memory,
// so passed back up through the layers it was copied at each, a load of
// what had just been stored in other widths, and written through a
// pointer instead each of its pointers took a write barrier while the
// collector ran (a drain's allocations keep it running often).
func makeRead(seq uint64, ts int64, body []byte) Record {
	return Record{Seq: seq, Time: time.Unix(0, ts), Body: body}
}

// tryRead returns the next record's fields (makeRead), or errNoData.
func (c *Cursor) tryRead() (seq uint64, ts int64, body []byte, err error) {
	c.prepareAhead()
	c.readMu.Lock()
	defer c.readMu.Unlock()
	seq, ts, body, err = c.readLocked()
	if err == nil {
		c.handed.addOwned(1)
	}
	return seq, ts, body, err
}

// prepareAhead opens what the reader needs for the segment it is about to
// enter, before readMu (prepare).
func (c *Cursor) prepareAhead() {
	if seg := c.ahead.Load(); seg != nil && c.ahead.CompareAndSwap(seg, nil) {
		c.prepare(seg)
	}
}

// ReadBatch is [Cursor.Read] of up to len(dst) records at once, into dst:
// it waits for the first as Read does, takes those ready after it without
// waiting, and returns how many it stored. Each is in flight until
// [Cursor.Ack], as from Read. It takes the cursor's lock once for them
// all, so a consumer that works through records in batches, or hands them
// on to others who Ack them meanwhile, does not contend for it once per
// record. An error met after the first record ends the batch early, and
// the next call meets it again. It returns 0 and no error only for an
// empty dst.
func (c *Cursor) ReadBatch(ctx context.Context, dst []Record) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	if c.backN.Load() > 0 {
		if n := c.readBack(dst); n > 0 {
			return n, nil
		}
	}
	for {
		n, err := c.tryReadBatch(dst)
		if err != errNoData {
			return n, err
		}
		wait := c.log.written.Wait()
		// Look again now that we are registered for the next write, as
		// Read does.
		if n, err = c.tryReadBatch(dst); err != errNoData {
			return n, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.log.closeCh:
			return 0, ErrClosed
		}
	}
}

// tryReadBatch fills dst with the records ready, at least one, or returns
// errNoData.
func (c *Cursor) tryReadBatch(dst []Record) (int, error) {
	c.prepareAhead()
	c.readMu.Lock()
	defer c.readMu.Unlock()
	n := 0
	for n < len(dst) {
		seq, ts, body, err := c.readLocked()
		if err != nil {
			if n == 0 {
				return 0, err
			}
			break
		}
		dst[n] = makeRead(seq, ts, body)
		n++
		if c.ahead.Load() != nil {
			break // the next segment's files are opened outside readMu, by the next call
		}
	}
	c.handed.addOwned(int64(n))
	return n, nil
}

// readLocked returns the next record's fields (makeRead) or errNoData,
// and the caller adds it to handed. The caller holds c.readMu.
func (c *Cursor) readLocked() (uint64, int64, []byte, error) {
	for {
		if c.closed || c.log.isClosed.Load() {
			return 0, 0, nil, ErrClosed
		}
		seq, ts, body, err := c.rd.nextRaw()
		if len(c.rd.removed) > 0 {
			c.passRemovedLocked(c.rd.removed)
		}
		if err == nil {
			seg := c.rd.seg
			c.log.crashPoint("read-taken")
			a, err := c.readAckFor(seg)
			if errors.Is(err, ErrNotFound) {
				// seg left the log (or a tombstone stands for it) after
				// nextRaw took the record from it: every cursor had
				// acknowledged all of it, or given it up, so the record
				// is passed over, and nextRaw, finding seg gone, moves
				// on. Given back instead, it came again at every Read,
				// each failing, until the next Open.
				continue
			}
			if err != nil {
				c.rd.unread(seq)
				c.log.readErrors.Add(1)
				return 0, 0, nil, err
			}
			if seq <= c.ackedMax {
				// Acknowledged before a restart, out of order.
				set, err := a.isSet(seq - seg.base)
				if err != nil {
					c.rd.unread(seq)
					return 0, 0, nil, err
				}
				if set {
					continue
				}
			}
			// Record that this far may be handed out before it is, so a
			// crash cannot leave an acknowledgement Open would not count.
			if err := a.raiseReadEnd(seq+1, seg.base); err != nil {
				c.rd.unread(seq)
				return 0, 0, nil, err
			}
			return seq, ts, body, nil
		}
		if err == errNoData {
			return 0, 0, nil, err
		}
		// next returns damage unwrapped; a type switch, unlike errors.As,
		// costs no allocation on this hot path.
		if d, ok := err.(*damageError); ok {
			c.quarantine(d)
			continue
		}
		c.log.readErrors.Add(1)
		return 0, 0, nil, err
	}
}

// readAckFor is ackFor for the segment a record was just read from, with
// its state cached between Reads as Ack caches its own (lastAcked): a
// drain reads thousands of records of a segment in a row. The caller
// holds c.readMu.
func (c *Cursor) readAckFor(seg *segment) (*ackFile, error) {
	if sa := c.lastRead; sa != nil && sa.seg == seg && sa.ack != nil {
		return sa.ack, nil
	}
	a, err := c.ackFor(seg)
	if err == nil {
		c.lastRead = c.segs[seg]
		// The reader has entered seg: have the next Read open the files
		// of the segment after it, if they are not, outside readMu.
		if nxt := c.log.segmentAfter(seg); nxt != nil {
			if sa := c.segs[nxt]; nxt.files.Load() == nil || sa == nil || sa.ack == nil {
				c.ahead.Store(nxt)
			}
		}
	}
	return a, err
}

// prepare opens what the reader needs to enter seg, without the cursor's
// readMu, so that no consumer of the cursor (nor Ack) waits behind the
// I/O: seg's read handles, whose first open reads and checks headers and
// may rebuild an index, with their mappings, and the cursor's existing
// bitmap of it, which is installed under readMu unless one was meanwhile
// or seg is leaving the log. What is missing or damaged is left to ackFor,
// under readMu (a bitmap is created only there, so two creations never
// race). Failures are ignored: the reader meets them again and reports
// them.
func (c *Cursor) prepare(seg *segment) {
	l := c.log
	if seg.gone.Load() {
		return
	}
	if f, err := l.acquireFiles(seg); err == nil {
		f.maps(l, seg)
		f.release()
	}
	c.readMu.Lock()
	sa := c.segs[seg]
	have := c.closed || sa != nil && sa.ack != nil
	c.readMu.Unlock()
	if have {
		return
	}
	capacity := c.ackCapacity(seg)
	a, flags, err := c.openAckFile(seg, capacity)
	if err != nil {
		return
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	sa = c.segs[seg]
	if flags&ackGone != 0 || c.closed || sa != nil && sa.ack != nil ||
		seg.gone.Load() || l.segmentAt(seg.base) != seg || seg.endNow() <= c.ackFloor.Load() {
		// A tombstone, a bitmap opened meanwhile, or a segment the floor
		// has passed (nothing would retire the file) or that is leaving.
		a.close()
		return
	}
	c.installLocked(c.state(seg), a)
}

// quarantine copies damaged bytes aside, reports them and treats their
// records as acknowledged, so the read cursor can pass them. The caller
// holds c.readMu. Each cursor that meets the damage does this; the bytes
// are copied aside once.
func (c *Cursor) quarantine(d *damageError) {
	lost := int64(d.next - d.first)
	c.log.corruptRecords.Add(lost)
	attrs := []any{"segment", d.seg.base, "offset", d.from, "first_seq", d.first, "records", lost, "err", d.cause}
	if d.to > d.from {
		name := fmt.Sprintf("%s.%d%s", d.seg.path(logSuffix), d.from, badSuffix)
		if err := c.log.copyBad(d.seg, d.from, d.to, name); err != nil {
			attrs = append(attrs, "bad_file_err", err)
		} else {
			attrs = append(attrs, "bad_file", name)
		}
	}
	c.logger.Warn("diskqueue: skipped damaged records", attrs...)
	c.ackPassedLocked(d.first, d.next, "diskqueue: cannot acknowledge damaged records; they are skipped again after a restart")
}

// ackPassedLocked counts as acknowledged, for this cursor, the records
// [from, to) its reader passed without handing them out: damaged ones, or
// ones compaction removed. What it cannot acknowledge it logs once, with
// why. Those it acknowledged that were not already it counts in Passed.
// The caller holds c.readMu.
func (c *Cursor) ackPassedLocked(from, to uint64, why string) {
	var seg *segment
	var failed, n int
	var firstErr error
	var firstSeq uint64
	for s := max(from, c.ackFloor.Load()); s < to; s++ {
		if seg == nil || s < seg.base || s >= seg.endNow() {
			seg = c.log.segmentAt(s)
		}
		if seg == nil || seg.gone.Load() {
			continue // deleted: every record in it acknowledged
		}
		a, err := c.ackFor(seg)
		if err == nil {
			// Open counts bits only below readEnd.
			err = a.raiseReadEnd(s+1, seg.base)
		}
		var was bool
		if err == nil {
			was, err = c.markAckedLocked(c.state(seg), s)
		}
		if err != nil {
			if failed == 0 {
				firstErr, firstSeq = err, s
			}
			failed++
		} else if !was {
			n++
		}
	}
	c.skipped.Add(int64(n))
	if failed > 0 {
		c.logger.Warn(why, "first_seq", firstSeq, "records", failed, "err", firstErr)
	}
}

// passRemovedLocked counts as acknowledged the records of gaps that
// compaction removed and the reader has just passed: whoever compacted
// them no longer needs them delivered, and a segment is deleted once every
// cursor has acknowledged all of it. Their bits are set as Ack sets them
// (readEnd raised first, as for damaged records), so Open counts them too;
// they are not counted in Acks, and were never in flight. The caller holds
// c.readMu.
func (c *Cursor) passRemovedLocked(gaps []seqRange) {
	for _, g := range gaps {
		c.ackPassedLocked(g.from, g.to, "diskqueue: cannot acknowledge records compaction removed; they stay in the cursor's depth until a restart passes them")
	}
}

// Passed returns how many records the cursor's reader has passed over
// since Open without handing them out, each counted as acknowledged then
// (not in Acks): damaged records it skipped, and records [Log.Compact]
// removed before it read them that were not acknowledged yet. Each was in
// [Cursor.Depth] until passed. A consumer that counts the records it
// expects to read (a channel's backlog) takes these off.
func (c *Cursor) Passed() int64 { return c.skipped.Load() }

// Ack acknowledges a record returned by [Cursor.Read]. Acknowledgements
// may come in any order. When Ack returns nil the acknowledgement is
// recorded in the segment's acknowledgement file, in the kernel: after a
// crash of the process the record is not delivered again to this cursor
// (after a power cut, only acknowledgements since the last fsync may be
// lost). The read cursor advances past the oldest record not yet
// acknowledged, and a segment every record of which every cursor has
// acknowledged is deleted (or retained, by Options). It returns
// [ErrNotInFlight] for a seq not handed out or already acknowledged.
func (c *Cursor) Ack(seq uint64) error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed || c.log.isClosed.Load() {
		// Close has released the files and the directory.
		return ErrClosed
	}
	if seq < c.ackFloor.Load() || seq >= c.rd.seq {
		return fmt.Errorf("%w: seq %d", ErrNotInFlight, seq)
	}
	// Acks mostly land in the segment the last one did.
	sa := c.lastAcked
	if sa == nil || seq < sa.seg.base || !sa.holds(seq) {
		seg := c.log.segmentAt(seq)
		if seg == nil || seg.gone.Load() {
			return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
		}
		sa = c.state(seg)
		c.lastAcked = sa
	}
	if sa.seg.gone.Load() {
		return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
	}
	was, err := c.markAckedLocked(sa, seq)
	if err != nil {
		return fmt.Errorf("diskqueue: ack %d: %w", seq, err)
	}
	if was {
		return fmt.Errorf("%w: seq %d already acknowledged", ErrNotInFlight, seq)
	}
	c.acks.addOwned(1)
	return nil
}

// Unacknowledged is [Log.Scan] of the records with from <= seq < to that
// this cursor has not acknowledged (those out of order above the read
// cursor, before a restart too, are left out, and so are those
// [Log.Compact] removed), as Read would hand them out. It moves no cursor.
func (c *Cursor) Unacknowledged(from, to uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for rec, err := range c.log.Scan(max(from, c.ackFloor.Load()), to) {
			if err == nil && c.acknowledged(rec.Seq) {
				continue
			}
			if !yield(rec, err) {
				return
			}
		}
	}
}

// acknowledged reports whether seq is acknowledged: below the floor, in a
// segment deleted as acknowledged, or with its bit set.
func (c *Cursor) acknowledged(seq uint64) bool {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if seq < c.ackFloor.Load() {
		return true
	}
	seg := c.log.segmentAt(seq)
	if seg == nil || seg.gone.Load() {
		return seg != nil
	}
	a, err := c.ackFor(seg)
	if err != nil {
		return false
	}
	set, _ := a.isSet(seq - seg.base)
	return set
}

// persist stores the read cursor if it moved. A failure is logged and
// kept for Close: the cursor only decides what is delivered again after a
// crash, never whether data is lost, so it does not stop writes. Only the
// writer goroutine calls it.
func (c *Cursor) persist() {
	if err := c.store(); err != nil {
		c.logger.Warn("diskqueue: cannot persist read cursor; acknowledged records may be delivered again after a crash", "err", err)
		if c.persistErr == nil {
			c.persistErr = err
		}
	}
}

// store writes the floor to the cursor file if it moved, fsynced unless
// NoSync (cursorFile.store). Only the writer goroutine calls it.
func (c *Cursor) store() error {
	floor := c.ackFloor.Load()
	if floor == c.persisted || c.file == nil || c.file.f == nil {
		return nil
	}
	c.log.crashPoint("cursor-persist")
	if err := c.file.store(floor); err != nil {
		return err
	}
	c.persisted = floor
	c.persistedAt = time.Now()
	return nil
}
