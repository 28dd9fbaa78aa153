package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// scanner decodes consecutive frames from an io.ReaderAt, in the shape of
// bufio.Scanner. It stops at the first frame that does not check out and
// reports the offset up to which everything was good, so recovery (and its
// fuzz test) can run over any bytes, with or without files.
type scanner struct {
	win     window
	off     int64  // offset of the next frame: the end of the good prefix
	seq     uint64 // seq the next frame must carry
	limit   int64
	maxBody int

	recOff int64
	hdr    recordHeader
	n      int
	err    error
}

func newScanner(r io.ReaderAt, off int64, seq uint64, limit int64, maxBody int) *scanner {
	s := &scanner{off: off, seq: seq, limit: limit, maxBody: maxBody}
	s.win.reset(r)
	return s
}

// Next decodes the next frame. It returns false at the end of the data
// (Err is nil) or at a frame that fails (Err says why: errShortFrame for one
// cut short, ErrCorrupt for bad bytes, or an I/O error).
func (s *scanner) Next() bool {
	if s.err != nil || s.off >= s.limit {
		return false
	}
	h, _, n, err := s.win.frameAt(s.off, s.limit, s.maxBody)
	if err == nil && h.seq != s.seq {
		err = fmt.Errorf("%w: record at offset %d has seq %d, want %d", ErrCorrupt, s.off, h.seq, s.seq)
	}
	if err != nil {
		s.err = err
		return false
	}
	s.recOff, s.hdr, s.n = s.off, h, n
	s.off += int64(n)
	s.seq++
	return true
}

// Record returns the offset, header and frame size of the last good frame.
func (s *scanner) Record() (int64, recordHeader, int) { return s.recOff, s.hdr, s.n }

// Err returns what stopped the scan, nil for a clean end.
func (s *scanner) Err() error { return s.err }

// Offset is the end of the good prefix.
func (s *scanner) Offset() int64 { return s.off }

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
	var unknown []string
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
	slices.Sort(bases)
	bases, ghosts := l.findTombstones(bases)
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
	end := l.segs[len(l.segs)-1].endNow()
	l.nextSeq.Store(end)
	l.openSeq = end

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
		if c, _, _ := loadCursor(l.fs, path, true, true); c != nil {
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

// findTombstones picks out the acknowledgement tombstones among the
// segments (ack.go): it returns the bases of logs still to open and, in
// order, those of segments deleted as fully acknowledged. A log whose
// tombstone is already written was being deleted when a crash came: its
// files are removed now.
func (l *Log) findTombstones(bases []uint64) (logs, ghosts []uint64) {
	for name := range l.listing {
		base, ok := parseSegmentName(name, ackSuffix)
		if !ok {
			continue
		}
		if size, err := l.listedSize(name); err != nil || size != ackHeaderSize {
			continue
		}
		b, err := readFile(l.fs, filepath.Join(l.dir, name))
		if err != nil {
			continue
		}
		if _, flags, err := decodeAckHeader(b, base); err == nil && flags&ackGone != 0 {
			ghosts = append(ghosts, base)
		}
	}
	slices.Sort(ghosts)
	for _, base := range bases {
		if _, found := slices.BinarySearch(ghosts, base); !found {
			logs = append(logs, base)
			continue
		}
		if l.readOnly {
			continue
		}
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			if err := l.fs.Remove(filepath.Join(l.dir, segmentName(base, suffix))); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.logger.Warn("diskqueue: cannot remove an acknowledged segment", "segment", base, "err", err)
			}
		}
	}
	return logs, ghosts
}

// removeTombstone deletes a tombstone no longer needed.
func (l *Log) removeTombstone(base uint64) {
	if l.readOnly {
		return
	}
	if err := l.fs.Remove(filepath.Join(l.dir, segmentName(base, ackSuffix))); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("diskqueue: cannot remove a tombstone", "segment", base, "err", err)
	}
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

// maybeUnsealed reports whether the sealed-looking segment at base may not
// have been sealed: a crash came after appends moved on and before the
// writer cut it to size. Such a log still has its preallocated size, a
// multiple of allocUnit; a sealed one has that size only by chance, and
// then checking its tail costs a few reads and changes nothing.
func (l *Log) maybeUnsealed(base uint64) bool {
	size, err := l.listedSize(segmentName(base, logSuffix))
	return err == nil && size > fileHeaderSize && size%allocUnit == 0
}

// removeOrphanIndexes deletes index files whose log is gone (a crash between
// the removals of a consumed segment's files).
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
				if err := l.fs.Remove(filepath.Join(l.dir, e.Name())); err != nil {
					l.logger.Warn("diskqueue: cannot remove orphan index", "file", e.Name(), "err", err)
				}
			}
		}
	}
}

// openSegment opens one segment found on disk. next is the base of the
// segment after it (which bounds its records) or maxSeq for the last;
// unsealed says an older segment may not have been sealed (maybeUnsealed),
// so its tail is checked like the last one's. A last segment whose header is damaged is set aside as .bad and nil is
// returned; the caller then starts a fresh segment at its base.
func (l *Log) openSegment(base, next uint64, last, unsealed bool) (*segment, error) {
	seg := &segment{dir: l.dir, base: base}
	if !last && !unsealed {
		return seg, l.openSealedLazily(seg, next)
	}
	name := seg.path(logSuffix)
	f, err := l.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	seg.setFiles(f, nil)
	size := fileSize(f)
	if size < 0 {
		seg.closeFiles()
		return nil, fmt.Errorf("diskqueue: open: cannot stat %s", name)
	}
	damage, intact, err := l.checkLogHeader(seg, f, size)
	if err != nil {
		seg.closeFiles()
		return nil, err
	}
	switch {
	case damage != nil && !intact && l.readOnly && last && l.beingCreated(f, size):
		// A live writer has just created this segment and not yet written
		// its header: it is empty, not damaged.
		seg.closeFiles()
		return nil, l.startSegment(base)
	case damage != nil && !intact:
		seg.closeFiles()
		if l.readOnly {
			l.logger.Warn("diskqueue: segment header is damaged; skipping it (read-only)", "segment", base, "err", damage)
			return nil, nil
		}
		return nil, l.setAside(seg, size, damage, last)
	case damage != nil && !l.readOnly:
		defer l.rewriteHeader(seg)
	}
	t, err := l.recoverTail(seg, size)
	if err != nil {
		seg.closeFiles()
		return nil, err
	}
	switch {
	case last && t != nil:
		l.t = t
	case t != nil:
		// An older segment a crash left unsealed: finish what the writer
		// would have done.
		if err := l.seal(t); err != nil {
			seg.closeFiles()
			return nil, fmt.Errorf("diskqueue: open: %w", err)
		}
		fallthrough
	case !last:
		seg.sealed.Store(true)
	}
	return seg, nil
}

// beingCreated reports whether a log's header is missing or all zeros: a
// segment a writer is creating at this moment (or a crash tore while it was
// created, before any record could be written in it).
func (l *Log) beingCreated(f file, size int64) bool {
	if size < fileHeaderSize {
		return true
	}
	head := make([]byte, fileHeaderSize)
	_, err := f.ReadAt(head, 0)
	return err == nil && allZero(head)
}

// checkLogHeader reads the header of seg's log. err is an I/O failure or a
// format version this code does not know. damage reports a header that is
// damaged; intact then says whether the first record checks out under the
// base in the file name, in which case only the header is damaged (it
// carries nothing the name does not), and that is logged here.
func (l *Log) checkLogHeader(seg *segment, f file, size int64) (damage error, intact bool, err error) {
	head := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil && err != io.EOF {
		return nil, false, fmt.Errorf("diskqueue: open: read %s: %w", seg.path(logSuffix), err)
	}
	got, herr := decodeFileHeader(head, magicLog)
	if herr == nil && got != seg.base {
		herr = fmt.Errorf("%w: header has base %d, file name says %d", ErrCorrupt, got, seg.base)
	}
	if errors.Is(herr, ErrUnsupportedVersion) {
		return nil, false, fmt.Errorf("%s: %w", seg.path(logSuffix), herr)
	}
	if herr == nil {
		return nil, true, nil
	}
	h, _, _, ferr := l.readFrameAt(f, fileHeaderSize, size)
	intact = size >= fileHeaderSize && ferr == nil && h.seq == seg.base
	if intact {
		l.logger.Warn("diskqueue: segment header is damaged but its records are intact; using the base in its name", "segment", seg.base, "err", herr)
	}
	return herr, intact, nil
}

// openSealedLazily takes a segment that was sealed before Open from the
// directory listing alone: sealed segments were fsynced whole at rotation,
// so nothing in them needs recovering, and their files are opened, and
// their headers and index sizes checked, on first use (segFiles). One stat
// of the log per sealed segment is all Open spends on it; a stat costs
// microseconds on a virtual machine, and there may be thousands.
//
// Until then the index is counted at the size its record count implies
// (what a sound index has) and the time index at an estimate; first use
// puts the real sizes into Stats and the disk budget.
func (l *Log) openSealedLazily(seg *segment, next uint64) error {
	size, err := l.listedSize(segmentName(seg.base, logSuffix))
	if err != nil {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	if size > math.MaxUint32 || next-seg.base > math.MaxUint32 {
		return fmt.Errorf("%w: %s is %d bytes for seqs %d..%d, more than a segment can hold", ErrCorrupt, seg.path(logSuffix), size, seg.base, next)
	}
	seg.setExtent(size, next)
	seg.sealed.Store(true)
	seg.maxTime.Store(unknownTime)
	seg.indexBytes.Store(fileHeaderSize + int64(next-seg.base)*indexEntrySize)
	// An entry for the first and the last record, and about one per
	// timeIndexIntervalBytes of log between them.
	seg.timeIndexBytes.Store(fileHeaderSize + (2+(size-fileHeaderSize)/timeIndexIntervalBytes)*timeIndexEntrySize)
	return nil
}

// segFiles returns seg's read handles, opening them on first use. A failure
// to open is returned as is and tried again by the next call: it is not
// damage. A deleted segment gives ErrNotFound.
func (l *Log) segFiles(seg *segment) (*segFiles, error) {
	if f := seg.files.Load(); f != nil {
		return f, nil
	}
	seg.filesMu.Lock()
	defer seg.filesMu.Unlock()
	if f := seg.files.Load(); f != nil {
		return f, nil
	}
	if seg.closed {
		return nil, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
	}
	before := seg.diskBytes()
	f, err := l.openSealed(seg)
	if err != nil {
		return nil, err
	}
	// Open counted the index files at their expected sizes.
	l.diskBytes.Add(seg.diskBytes() - before)
	seg.files.Store(f)
	return f, nil
}

// openSealed opens a sealed segment's log and index and checks them: a
// damaged log header is only logged (readers check every record anyway and
// skip the damaged ones); an index that is missing, has a damaged header or
// the wrong size, or a time index of the wrong shape, is rebuilt from the
// log (a read-only queue goes without, and lookups scan the log). It
// records the index files' real sizes in seg.
func (l *Log) openSealed(seg *segment) (*segFiles, error) {
	log, err := l.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("diskqueue: %w", err)
	}
	fail := func(err error) (*segFiles, error) {
		log.Close()
		return nil, err
	}
	damage, intact, err := l.checkLogHeader(seg, log, seg.sizeNow())
	if err != nil {
		return fail(err)
	}
	if damage != nil && !intact {
		l.logger.Warn("diskqueue: segment header is damaged; its records are checked one by one and damaged ones skipped", "segment", seg.base, "err", damage)
	}
	count := int64(seg.endNow() - seg.base)
	timeBytes := l.statSize(seg.path(timeIndexSuffix))
	timeOK := timeBytes >= fileHeaderSize+timeIndexEntrySize && (timeBytes-fileHeaderSize)%timeIndexEntrySize == 0
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	indexBytes := fileSize(index)
	rebuild := false
	switch {
	case errors.Is(err, os.ErrNotExist):
		rebuild = true
	case err != nil:
		return fail(fmt.Errorf("diskqueue: %w", err))
	case !timeOK || indexBytes != fileHeaderSize+count*indexEntrySize || !l.headerOK(index, magicIndex, seg.base):
		index.Close()
		index, rebuild = nil, true
	}
	seg.indexBytes.Store(max(indexBytes, 0))
	seg.timeIndexBytes.Store(max(timeBytes, 0))
	if !rebuild {
		return &segFiles{log: log, index: index}, nil
	}
	if l.readOnly {
		l.logger.Warn("diskqueue: a sealed segment's indexes are damaged (read-only: not rebuilt); lookups in it scan the log", "segment", seg.base)
		return &segFiles{log: log}, nil
	}
	if err := l.rebuildIndexes(seg, log); err != nil {
		return fail(err)
	}
	if index, err = l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0); err != nil {
		return fail(fmt.Errorf("diskqueue: %w", err))
	}
	return &segFiles{log: log, index: index}, nil
}

// statSize is the size of the file at path, or -1 if it cannot be had.
func (l *Log) statSize(path string) int64 {
	info, err := l.fs.Stat(path)
	if err != nil {
		return -1
	}
	return info.Size()
}

// rewriteHeader repairs the header of the segment the writer appends to.
func (l *Log) rewriteHeader(seg *segment) {
	if l.t == nil || l.t.seg != seg {
		return
	}
	if _, err := l.t.log.f.WriteAt(appendFileHeader(nil, magicLog, seg.base), 0); err != nil {
		l.logger.Warn("diskqueue: cannot repair segment header", "segment", seg.base, "err", err)
	}
}

// setAside quarantines a segment whose header is unreadable. A last
// segment shorter than a header is a crash during its creation, before any
// record in it could be acknowledged; anything else is damage.
func (l *Log) setAside(seg *segment, size int64, cause error, last bool) error {
	name := seg.path(logSuffix)
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		if err := l.fs.Remove(seg.path(suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("diskqueue: open: %w", err)
		}
	}
	if last && size < fileHeaderSize {
		l.logger.Warn("diskqueue: removing a segment cut short while it was created", "segment", seg.base, "err", cause)
		if err := l.fs.Remove(name); err != nil {
			return fmt.Errorf("diskqueue: open: %w", err)
		}
		return nil
	}
	if err := l.fs.Rename(name, name+badSuffix); err != nil {
		return fmt.Errorf("diskqueue: open: quarantine %s: %w", name, err)
	}
	l.badFiles.Add(1)
	l.logger.Warn("diskqueue: segment header is damaged; moved aside, its records are skipped", "segment", seg.base, "bad_file", name+badSuffix, "err", cause)
	return nil
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

// unknownTime marks a sealed segment whose newest timestamp has not been
// read yet.
const unknownTime = math.MinInt64

// segMaxTime returns the newest timestamp in seg (the time index's running
// maximum at its last record), reading it on first use. If the time index
// cannot say, the log is scanned.
func (l *Log) segMaxTime(seg *segment) int64 {
	if t := seg.maxTime.Load(); t != unknownTime {
		return t
	}
	t, err := l.lastTimeEntry(seg)
	if err != nil {
		l.logger.Warn("diskqueue: time index is damaged; scanning the segment for its newest timestamp", "segment", seg.base, "err", err)
		t = unknownTime + 1
		if f, err := l.segFiles(seg); err == nil {
			sc := newScanner(f.log, fileHeaderSize, seg.base, seg.sizeNow(), maxBodyForRead(l.opts.MaxRecordBytes))
			for sc.Next() {
				_, h, _ := sc.Record()
				t = max(t, h.ts)
			}
		}
	}
	seg.maxTime.CompareAndSwap(unknownTime, t)
	return seg.maxTime.Load()
}

func (l *Log) lastTimeEntry(seg *segment) (int64, error) {
	f, err := l.fs.OpenFile(seg.path(timeIndexSuffix), os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := fileSize(f)
	var e [timeIndexEntrySize]byte
	if n < fileHeaderSize+timeIndexEntrySize {
		return 0, fmt.Errorf("%w: time index has no entries", ErrCorrupt)
	}
	if _, err := f.ReadAt(e[:], n-timeIndexEntrySize); err != nil {
		return 0, err
	}
	if seq := binary.BigEndian.Uint64(e[8:]); seq != seg.endNow()-1 {
		return 0, fmt.Errorf("%w: last time index entry is for seq %d, the segment ends at %d", ErrCorrupt, seq, seg.endNow()-1)
	}
	return int64(binary.BigEndian.Uint64(e[:])), nil
}

func (l *Log) headerOK(f file, magic [4]byte, base uint64) bool {
	head := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil {
		return false
	}
	got, err := decodeFileHeader(head, magic)
	return err == nil && got == base
}

// fileSize is f's size, or -1 for no file or an error.
func fileSize(f file) int64 {
	if f == nil {
		return -1
	}
	info, err := f.Stat()
	if err != nil {
		return -1
	}
	return info.Size()
}
