package diskqueue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// recover runs in Open before the writer starts: it reads the directory,
// checks every segment's header, repairs the tail of the last segment and
// its indexes, loads the read cursor and prepares the writer. It reads only
// the part of the log that may not have been synced: sealed segments were
// fsynced whole at rotation.
func (l *Log) recover() error {
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	var bases []uint64
	var unknown, compacting []string
	bad := 0
	l.listing = make(map[string]os.DirEntry, len(entries))
	defer func() { l.listing = nil }()
	for _, e := range entries {
		name := e.Name()
		l.listing[name] = e
		if base, ok := parseSegmentName(name, logSuffix); ok {
			bases = append(bases, base)
			continue
		}
		switch {
		case name == cursorName || name == lockName || name == cursorsDir:
		case strings.HasPrefix(name, spareName+"."):
			// A spare segment made ahead of need; nothing refers to it.
			if !l.readOnly {
				l.fs.Remove(filepath.Join(l.dir, name))
			}
		case strings.HasSuffix(name, compactSuffix):
			// A compaction's marker or new files, which a crash cut short.
			compacting = append(compacting, name)
		case strings.HasSuffix(name, tmpSuffix):
			// An atomic write that never finished; nothing refers to it.
			if l.readOnly {
				continue
			}
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				l.logger.Warn("diskqueue: cannot remove temporary file", "file", name, "err", err)
			}
		case strings.HasSuffix(name, badSuffix):
			bad++
		case strings.HasSuffix(name, indexSuffix), strings.HasSuffix(name, timeIndexSuffix), strings.HasSuffix(name, ackSuffix):
			// Paired with a log below; orphans are removed after.
		case e.IsDir():
			// Subdirectories are the embedding program's (spillq keeps its
			// timer store in one), except cursors/.
		default:
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		l.logger.Warn("diskqueue: leaving unknown files alone", "files", unknown)
	}
	if bad > 0 && !l.readOnly { // a read-only caller (Verify) lists them itself
		l.logger.Warn("diskqueue: directory holds quarantined .bad files; inspect and delete them by hand", "count", bad)
	}
	// Before the segments are looked at: their files may be half renamed.
	if err := l.finishCompactions(compacting); err != nil {
		return err
	}
	slices.Sort(bases)
	bases, ghosts := l.findTombstones(bases)
	bases = l.dropLostTail(bases, ghosts)
	if !l.readOnly {
		l.removeOrphanIndexes(entries, bases, ghosts)
	}

	for i, base := range bases {
		last := i == len(bases)-1
		next := uint64(maxSeq)
		if !last {
			next = bases[i+1]
		}
		// Tombstones of segments deleted ahead of an older one stand for
		// their gap; leading ones (nothing older left) are cleared away.
		for len(ghosts) > 0 && ghosts[0] < base {
			g := ghosts[0]
			ghosts = ghosts[1:]
			if len(l.segs) == 0 {
				l.removeTombstone(g)
				continue
			}
			ghost := &segment{dir: l.dir, base: g, closed: true}
			end := base
			if len(ghosts) > 0 {
				end = min(end, ghosts[0])
			}
			ghost.setExtent(0, end)
			ghost.sealed.Store(true)
			ghost.gone.Store(true)
			l.segs = append(l.segs, ghost)
		}
		if len(ghosts) > 0 {
			// A sealed segment ends where the next one starts, and a
			// tombstone after it is the next one.
			next = min(next, ghosts[0])
		}
		unsealed := !last && l.maybeUnsealed(base)
		if len(l.segs) > 0 && (last || unsealed) {
			// A tail's time index continues the running maximum of the
			// segments before it.
			l.lastMaxTime = l.segMaxTime(l.segs[len(l.segs)-1])
		}
		seg, err := l.openSegment(base, next, last, unsealed)
		if err != nil {
			return err
		}
		if seg != nil {
			l.segs = append(l.segs, seg)
		}
	}
	for _, g := range ghosts {
		l.removeTombstone(g) // after the last log: nothing to stand for
	}
	if len(l.segs) == 0 || l.segs[len(l.segs)-1].sealed.Load() {
		// No segments yet, or the last one was unusable: start a new one
		// where the log left off, so seqs never go backwards.
		base := l.storedReadSeq()
		if n := len(bases); n > 0 {
			base = bases[n-1]
			if len(l.segs) > 0 {
				base = max(base, l.segs[len(l.segs)-1].endNow())
			}
		}
		if err := l.startSegment(base); err != nil {
			return err
		}
	}
	if t := l.t; t != nil && !t.mapped && !l.opts.writePathForTesting {
		if err := l.startAppending(t, true); err != nil {
			return err
		}
	}
	l.mapped = l.t != nil && l.t.mapped
	for _, s := range l.segs {
		l.diskBytes.Add(s.diskBytes())
	}
	l.nextSeq.last.Store(l.segs[len(l.segs)-1])
	l.openSeq = l.nextSeq.Load()

	if t := l.t; t != nil {
		t.ackCap = l.recordCapacity() // lowered by each cursor's bitmap
	}
	if err := l.loadCursors(); err != nil {
		return err
	}
	return nil
}

// storedReadSeq is the furthest read position any stored cursor file
// holds: where a log whose segments are all missing starts again, so seqs
// never go backwards.
func (l *Log) storedReadSeq() uint64 {
	var seq uint64
	peek := func(path string) {
		if c, _, _ := loadCursor(l.fs, path, l.opts.FileMode, true, true); c != nil {
			seq = max(seq, c.state.readSeq)
		}
	}
	peek(filepath.Join(l.dir, cursorName))
	entries, _ := l.fs.ReadDir(filepath.Join(l.dir, cursorsDir))
	for _, e := range entries {
		peek(filepath.Join(l.dir, cursorsDir, e.Name(), cursorName))
	}
	return seq
}

// startSegment begins an empty last segment at base during Open. A
// read-only queue may create nothing, so it gets one in memory only.
func (l *Log) startSegment(base uint64) error {
	if l.readOnly {
		seg := &segment{dir: l.dir, base: base}
		seg.setFiles(nil, nil) // nothing to open; it stays empty
		seg.setExtent(fileHeaderSize, base)
		l.segs = append(l.segs, seg)
		return nil
	}
	seg, t, err := l.createSegment(base, l.lastMaxTime, !l.opts.writePathForTesting)
	if err != nil {
		return err
	}
	l.segs = append(l.segs, seg)
	l.t = t
	l.dirDirty = true
	return nil
}

// removeOrphanIndexes deletes index files whose log is gone (a crash between
// the removals of a consumed segment's files). entries is the listing Open
// read: dropLostTail has removed a lost segment's files since.
func (l *Log) removeOrphanIndexes(entries []os.DirEntry, bases, ghosts []uint64) {
	for _, e := range entries {
		for _, suffix := range []string{indexSuffix, timeIndexSuffix, ackSuffix} {
			base, ok := parseSegmentName(e.Name(), suffix)
			if !ok {
				continue
			}
			if _, ghost := slices.BinarySearch(ghosts, base); ghost && suffix == ackSuffix {
				continue
			}
			if _, found := slices.BinarySearch(bases, base); !found {
				if err := l.fs.Remove(filepath.Join(l.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					l.logger.Warn("diskqueue: cannot remove orphan index", "file", e.Name(), "err", err)
				}
			}
		}
	}
}

// listedSize is the size of a file in the directory listing Open read.
func (l *Log) listedSize(name string) (int64, error) {
	e, ok := l.listing[name]
	if !ok {
		return -1, fmt.Errorf("%s: %w", filepath.Join(l.dir, name), os.ErrNotExist)
	}
	info, err := e.Info() // an lstat: once per name, then kept
	if err != nil {
		return -1, err
	}
	l.listing[name] = fs.FileInfoToDirEntry(info)
	return info.Size(), nil
}
