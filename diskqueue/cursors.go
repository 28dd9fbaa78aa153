package diskqueue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
)

// cursorRegistry is the set of a log's cursors. Adding or removing one
// takes the log's mu, so appends (which create and grow each cursor's
// bitmap of the active segment) see a fixed set; cursorList is the same
// set for readers that hold no lock. cursors is never changed in place:
// a holder of it (a spare's snapshot) keeps the set it took.
type cursorRegistry struct {
	cursors    []*Cursor
	cursorList atomic.Pointer[[]*Cursor]
}

// addCursor registers c. The caller holds the log's mu.
func (r *cursorRegistry) addCursor(c *Cursor) {
	r.cursors = append(r.cursors, c)
	r.publishCursors()
}

// removeCursor takes out the cursor named name and returns it, or nil if there
// is none. The caller holds the log's mu.
func (r *cursorRegistry) removeCursor(name string) *Cursor {
	i := slices.IndexFunc(r.cursors, func(c *Cursor) bool { return c.name == name })
	if i < 0 {
		return nil
	}
	c := r.cursors[i]
	r.cursors = slices.Delete(slices.Clone(r.cursors), i, i+1)
	r.publishCursors()
	return c
}

func (r *cursorRegistry) publishCursors() {
	list := slices.Clone(r.cursors)
	r.cursorList.Store(&list)
}

// cursorNamed returns the cursor named name, or nil. The caller holds the
// log's mu.
func (r *cursorRegistry) cursorNamed(name string) *Cursor {
	for _, c := range r.cursors {
		if c.name == name {
			return c
		}
	}
	return nil
}

// cursorNames returns the cursors' names, sorted, without a lock.
func (r *cursorRegistry) cursorNames() []string {
	var names []string
	for _, c := range *r.cursorList.Load() {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}

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
func (l *Log) Cursors() []string { return l.cursorNames() }

// cursor returns the named cursor ("" is a Queue's own), opening or
// creating it.
func (l *Log) cursor(name string, start Start) (*Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if c := l.cursorNamed(name); c != nil {
		return c, nil
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
	l.addCursor(c)
	l.countBitmapsLocked(1)
	return nil
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
	c := l.removeCursor(name)
	if c == nil {
		return nil, fmt.Errorf("%w: cursor %q", ErrNotFound, name)
	}
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
