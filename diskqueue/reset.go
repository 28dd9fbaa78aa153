package diskqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ResetCursor moves the named cursor to start, as deleting it and creating
// it again there would, but in steps no crash can split into a lost
// cursor: its acknowledgement files are removed first (a crash then
// leaves it at its old place with nothing acknowledged above it: records
// after its read position may be delivered again, never lost), then its
// new position is stored, fsynced. Forward or back: moving back delivers
// again records it had acknowledged, if the log still holds them.
//
// The *Cursor for name obtained before is closed: its Read and Ack return
// [ErrClosed]; [Log.Cursor] returns the cursor at its new place. It returns
// [ErrNotFound] for a cursor that does not exist.
func (l *Log) ResetCursor(name string, start Start) error {
	if err := checkCursorName(name); err != nil {
		return err
	}
	if l.readOnly {
		return ErrReadOnly
	}
	return l.request(func() error { return l.resetCursor(name, start) })
}

// resetCursor runs on the writer goroutine, so no seal, deletion or
// housekeeping round sees the cursor half moved.
func (l *Log) resetCursor(name string, start Start) error {
	seq, err := l.startSeq(start)
	if err != nil {
		return fmt.Errorf("diskqueue: reset cursor %q: %w", name, err)
	}
	c, err := l.takeOut(name)
	if err != nil {
		return err
	}
	serr := l.storeReset(c.dir, seq)
	// Registered again whatever happened, from what its files say now
	// (its old place if the new one was not stored): out of the log, it
	// would let housekeeping delete records it has not acknowledged.
	l.mu.Lock()
	defer l.mu.Unlock()
	nc, err := l.openCursor(name, start, false)
	if serr != nil {
		err = errors.Join(serr, err)
	}
	if err != nil {
		if nc != nil {
			if rerr := l.registerLocked(nc); rerr != nil {
				nc.closeFiles()
			}
		}
		return fmt.Errorf("diskqueue: reset cursor %q: %w", name, err)
	}
	if err := l.registerLocked(nc); err != nil {
		nc.closeFiles()
		return fmt.Errorf("diskqueue: reset cursor %q: %w", name, err)
	}
	l.wake() // moved forward, it may free segments
	return nil
}

// storeReset removes the acknowledgement files in dir, then stores seq as
// the position in its cursor file, each step durable before the next.
func (l *Log) storeReset(dir string, seq uint64) error {
	entries, err := l.fs.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ackSuffix) {
			continue
		}
		if err := l.fs.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(dir); err != nil {
			return err
		}
	}
	l.crashPoint("reset-cursor")
	cf, _, err := loadCursor(l.fs, filepath.Join(dir, cursorName), l.opts.FileMode, l.opts.NoSync, false)
	if cf == nil {
		return err
	}
	defer cf.close()
	return cf.store(seq)
}
