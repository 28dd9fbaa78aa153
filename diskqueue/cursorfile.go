package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"time"
)

// The cursor file persists the one thing that cannot be recomputed from the
// log: the read position. It holds two fixed slots written alternately, each
// with its own checksum, so a torn write spoils at most the slot being
// written and the other still holds the previous position. One pwrite and one
// fsync per update; no rename, no directory fsync.
//
//	slot (32 bytes), at offset 0 and 32:
//	0       4     5          8               16                24       28      32
//	| magic | ver | reserved | gen uint64 BE  | readSeq uint64 | crc32c | zero  |
const (
	cursorSlotSize = 32
	cursorFileSize = 2 * cursorSlotSize
)

// cursorState is what a slot holds.
type cursorState struct {
	gen     uint64 // increases with every store; the higher valid slot wins
	readSeq uint64 // oldest record not yet acknowledged
}

func encodeCursorSlot(c cursorState) []byte {
	b := make([]byte, 0, cursorSlotSize)
	b = append(b, magicCursor[:]...)
	b = append(b, formatVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, c.gen)
	b = binary.BigEndian.AppendUint64(b, c.readSeq)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return append(b, 0, 0, 0, 0)
}

func decodeCursorSlot(b []byte) (cursorState, error) {
	if len(b) < cursorSlotSize {
		return cursorState{}, fmt.Errorf("%w: cursor slot is %d bytes", ErrCorrupt, len(b))
	}
	if [4]byte(b[0:4]) != magicCursor {
		return cursorState{}, fmt.Errorf("%w: cursor slot has bad magic %q", ErrCorrupt, b[0:4])
	}
	if b[4] != formatVersion {
		return cursorState{}, fmt.Errorf("%w: cursor format version %d", ErrUnsupportedVersion, b[4])
	}
	if got, want := crc32.Checksum(b[:24], crcTable), binary.BigEndian.Uint32(b[24:28]); got != want {
		return cursorState{}, fmt.Errorf("%w: cursor slot checksum mismatch", ErrCorrupt)
	}
	return cursorState{
		gen:     binary.BigEndian.Uint64(b[8:16]),
		readSeq: binary.BigEndian.Uint64(b[16:24]),
	}, nil
}

// decodeCursorFile returns the newest valid slot. It fails only when neither
// slot is valid.
func decodeCursorFile(b []byte) (cursorState, error) {
	var best cursorState
	var firstErr error
	found := false
	for i := 0; i < 2; i++ {
		lo := i * cursorSlotSize
		if lo >= len(b) {
			if firstErr == nil {
				firstErr = fmt.Errorf("%w: cursor file is %d bytes", ErrCorrupt, len(b))
			}
			continue
		}
		c, err := decodeCursorSlot(b[lo:min(len(b), lo+cursorSlotSize)])
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !found || c.gen > best.gen {
			best, found = c, true
		}
	}
	if !found {
		return cursorState{}, firstErr
	}
	return best, nil
}

// cursorFile owns the open cursor file. Only the writer goroutine (and Open
// and Close, which run when it does not) touches it.
type cursorFile struct {
	f      file
	state  cursorState
	noSync bool
}

// loadCursor opens (creating if needed) the cursor file in dir. exists
// reports whether a valid position was read; when it is false the caller
// decides the position and stores it.
func loadCursor(fsys fileSystem, path string, perm fs.FileMode, noSync, readOnly bool) (c *cursorFile, exists bool, err error) {
	flag := os.O_RDWR | os.O_CREATE
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := fsys.OpenFile(path, flag, perm)
	if readOnly && errors.Is(err, os.ErrNotExist) {
		return &cursorFile{f: nil, noSync: true}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if readOnly {
		// A read-only view keeps nothing open: it never stores.
		defer func() {
			f.Close()
			if c != nil {
				c.f = nil
			}
		}()
	}
	c = &cursorFile{f: f, noSync: noSync}
	buf := make([]byte, cursorFileSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		f.Close()
		return nil, false, fmt.Errorf("diskqueue: read cursor: %w", err)
	}
	if n == 0 {
		return c, false, nil
	}
	st, err := decodeCursorFile(buf[:n])
	if err != nil {
		return c, false, err
	}
	c.state = st
	return c, true, nil
}

// store persists readSeq in the slot not holding the current position.
func (c *cursorFile) store(readSeq uint64) error {
	next := cursorState{gen: c.state.gen + 1, readSeq: readSeq}
	if _, err := c.f.WriteAt(encodeCursorSlot(next), int64(next.gen%2)*cursorSlotSize); err != nil {
		return fmt.Errorf("diskqueue: write cursor: %w", err)
	}
	if !c.noSync {
		if err := c.f.Sync(); err != nil {
			return fmt.Errorf("diskqueue: sync cursor: %w", err)
		}
	}
	c.state = next
	return nil
}

func (c *cursorFile) close() error { return c.f.Close() }

// storedPosition is a cursor's file and what was last stored in it. It
// is touched only by the writer goroutine once the cursor is registered
// with the log (and before that by whoever creates it, and by Close once
// the writer has returned).
type storedPosition struct {
	file        *cursorFile
	persisted   uint64    // readSeq last stored in the cursor file
	persistedAt time.Time // when
	persistErr  error     // the first failure to store it, for Close
}

// positionMoved reports whether seq differs from what is stored, and there is a
// file to store it in.
func (p *storedPosition) positionMoved(seq uint64) bool {
	return seq != p.persisted && p.file != nil && p.file.f != nil
}

// savePosition stores seq, fsynced unless NoSync (cursorFile.store).
func (p *storedPosition) savePosition(seq uint64) error {
	if err := p.file.store(seq); err != nil {
		return err
	}
	p.persisted = seq
	p.persistedAt = time.Now()
	return nil
}

// saveFailed keeps the first failure to store, for Close.
func (p *storedPosition) saveFailed(err error) {
	if p.persistErr == nil {
		p.persistErr = err
	}
}

// closeCursorFile closes the cursor file, once.
func (p *storedPosition) closeCursorFile() {
	if p.file != nil && p.file.f != nil {
		p.file.close()
		p.file.f = nil
	}
}

// persist stores the read cursor if it moved. A failure is logged and
// kept for Close: the cursor only decides what is delivered again after a
// crash, never whether data is lost, so it does not stop writes. Only the
// writer goroutine calls it.
func (c *Cursor) persist() {
	if err := c.store(); err != nil {
		c.logger.Warn("diskqueue: cannot persist read cursor; acknowledged records may be delivered again after a crash", "err", err)
		c.saveFailed(err)
	}
}

// store writes the floor to the cursor file if it moved, fsynced unless
// NoSync (cursorFile.store). Only the writer goroutine calls it.
func (c *Cursor) store() error {
	floor := c.ackFloor.Load()
	if !c.positionMoved(floor) {
		return nil
	}
	c.log.crashPoint("cursor-persist")
	return c.savePosition(floor)
}
