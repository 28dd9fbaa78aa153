package diskqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

// dropLostTail removes the segments at the end of the log that hold no
// record (no more than a header, or a header of zeros: neverSynced), when
// one with records comes before them, and when none holds
// any, all but the first, which appends go on in: either a power cut came
// after a directory fsync made their names durable (it covers every name,
// also of segments rotated out after the round began) and before anything
// fsynced their contents, or the last was rotated to and got no record.
// No Put of a lost record was promised durable, under any sync policy, so
// they are the log's torn tail, dropped as Open drops a torn record, not
// damage. The segment before them is then the last, and recovered as one
// (its own torn records cut), and appends go on from its end, so seqs of
// lost records are used again. A read-only view leaves them out without
// removing them. ghosts are the tombstones (findTombstones).
func (l *Log) dropLostTail(bases, ghosts []uint64) []uint64 {
	k := len(bases)
	zeroed := false // the first lost segment is its preallocated size in zeros
	for k > 0 {
		name := segmentName(bases[k-1], logSuffix)
		size, err := l.listedSize(name)
		if err != nil || size > fileHeaderSize && !l.neverSynced(name) {
			break
		}
		zeroed = size > fileHeaderSize
		k--
	}
	kept := false // the first lost segment stays, for appends to go on in
	if k < len(bases) && k > 0 && (l.isCompacted(bases[k-1]) || len(ghosts) > 0 && ghosts[len(ghosts)-1] > bases[k-1]) {
		// A compacted segment never takes appends: the first lost one
		// stays, as the segment they go on in, so that the compacted
		// segment keeps its end (its trailing seqs may be removed ones).
		// So it does after tombstones, so that their seqs, of records
		// acknowledged and deleted, are not given to new records.
		k++
		kept = true
	}
	if k == 0 && len(bases) > 0 {
		// Every segment lost its records: the first is the one they go
		// on in, as a segment left empty by its creation is (setAside).
		k = 1
		kept = true
	}
	if kept && zeroed && !l.readOnly {
		l.emptyLost(bases[k-1])
	}
	if k == len(bases) {
		return bases // none, or the one left is the first
	}
	lost := bases[k:]
	if l.readOnly {
		return bases[:k] // a view leaves them for the next Open to remove
	}
	l.logger.Warn("diskqueue: segments at the end of the log lost their records in a power cut before any was fsynced; removing them (none was promised durable)",
		"from_seq", lost[0], "segments", len(lost))
	for _, base := range lost {
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, ackSuffix} {
			name := segmentName(base, suffix)
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.logger.Warn("diskqueue: cannot remove a lost segment's file", "file", name, "err", err)
			}
			delete(l.listing, name)
		}
	}
	return bases[:k]
}

// neverSynced reports whether the segment log file name, longer than a
// header, starts with a header and a first record frame of zeros: its
// preallocated size reached the disk (a journal commits an allocation on
// its own) and none of its bytes did. Every fsync of a segment covers its
// header and its first record (SyncMapped syncs from offset 0; the write
// path fsyncs the whole file), which are written before any other record,
// so no record in it was ever fsynced: it is lost as one of header size
// is. A header of zeros before a first record that is there is damage to
// the header, which Open repairs from the records (checkLogHeader).
func (l *Log) neverSynced(name string) bool {
	head, err := readHead(l.fs, filepath.Join(l.dir, name), fileHeaderSize+recordHeaderSize)
	return err == nil && len(head) >= fileHeaderSize && allZero(head)
}

// emptyLost makes the kept first lost segment of base (dropLostTail), what
// a power cut left of it its preallocated size in zeros (neverSynced), as
// empty as a segment a power cut left of header size: its files cut to
// nothing, so Open takes it for one left empty by its creation and appends
// go on in it, not for a damaged one to set aside.
func (l *Log) emptyLost(base uint64) {
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		n := segmentName(base, suffix)
		path := filepath.Join(l.dir, n)
		f, err := l.fs.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		err = f.Truncate(0)
		f.Close()
		if err != nil {
			l.logger.Warn("diskqueue: cannot empty a lost segment's file", "file", n, "err", err)
			continue
		}
		if info, err := l.fs.Stat(path); err == nil {
			l.listing[n] = fs.FileInfoToDirEntry(info)
		}
	}
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

// maybeUnsealed reports whether the sealed-looking segment at base may not
// have been sealed: a crash came after appends moved on and before the
// writer cut it to size. Such a log still has its preallocated size, a
// multiple of allocUnit; a sealed one has that size only by chance, and
// then checking its tail costs a few reads and changes nothing.
func (l *Log) maybeUnsealed(base uint64) bool {
	size, err := l.listedSize(segmentName(base, logSuffix))
	return err == nil && size > fileHeaderSize && size%allocUnit == 0 && !l.isCompacted(base)
}

// isCompacted reports whether the log at base has a compacted segment's
// header: compaction rewrites only sealed segments, so such a log was
// sealed, whatever its size.
func (l *Log) isCompacted(base uint64) bool {
	f, err := l.fs.OpenFile(filepath.Join(l.dir, segmentName(base, logSuffix)), os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	ok, compacted := l.segmentHeaderOK(f, magicLog, base)
	return ok && compacted
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

// openSegment opens one segment found on disk. next is the base of the
// segment after it (which bounds its records) or maxSeq for the last;
// unsealed says an older segment may not have been sealed (maybeUnsealed),
// so its tail is checked like the last one's. A last segment whose header is damaged is set aside as .bad and nil is
// returned; the caller then starts a fresh segment at its base.
func (l *Log) openSegment(base, next uint64, last, unsealed bool) (*segment, error) {
	seg := &segment{dir: l.dir, base: base}
	if !last && !unsealed {
		err := l.openSealedLazily(seg, next)
		if err != nil && l.readOnly && errors.Is(err, os.ErrNotExist) {
			// A live writer deleted it, consumed, since the listing.
			return nil, nil
		}
		return seg, err
	}
	name := seg.path(logSuffix)
	f, err := l.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		if l.readOnly && errors.Is(err, os.ErrNotExist) && !last {
			return nil, nil // deleted since the listing, as above
		}
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	seg.setFiles(f, nil)
	size := fileSize(f)
	if size < 0 {
		seg.closeFiles()
		return nil, fmt.Errorf("diskqueue: open: cannot stat %s", name)
	}
	hdr, err := l.checkLogHeader(seg, f, size)
	if err == nil && hdr.damage != nil && l.readOnly && last && size >= fileHeaderSize && !l.beingCreated(f, size) {
		// The header read as zeros and is not now: a live writer wrote it
		// meanwhile (checkLogHeader read the first record after it). Read
		// it again.
		hdr, err = l.checkLogHeader(seg, f, size)
	}
	if err != nil {
		seg.closeFiles()
		return nil, err
	}
	if hdr.compacted {
		// Compacted, so sealed: nothing appends to it again. It is last
		// only when the segments after it were lost whole (dropLostTail
		// keeps the one right after a compacted segment).
		seg.closeFiles()
		return l.openCompactedLast(base, next)
	}
	damage, intact := hdr.damage, hdr.intact
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

// openCompactedLast takes a compacted segment found last, or looking
// unsealed, as the sealed segment it is. The last one's end is its
// index's record count (compaction keeps one entry per seq), else its
// time index's last seq; appends go on after it, so no seq is used twice.
func (l *Log) openCompactedLast(base, next uint64) (*segment, error) {
	seg := &segment{dir: l.dir, base: base}
	if next == maxSeq {
		end, ok := l.compactedEnd(seg)
		if !ok {
			return nil, fmt.Errorf("%w: %s is a compacted segment found last, and neither of its indexes says where it ends", ErrCorrupt, seg.path(logSuffix))
		}
		next = end
	}
	if err := l.openSealedLazily(seg, next); err != nil {
		return nil, err
	}
	return seg, nil
}

// compactedEnd is the end of a compacted segment by its indexes.
func (l *Log) compactedEnd(seg *segment) (uint64, bool) {
	if f, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0); err == nil {
		defer f.Close()
		if ok, compacted := l.segmentHeaderOK(f, magicIndex, seg.base); ok && compacted {
			return seg.base + uint64(indexEntriesIn(fileSize(f)-indexChecksumSize)), true
		}
	}
	if b, err := readFile(l.fs, seg.path(timeIndexSuffix)); err == nil {
		if entries, err := decodeTimeIndex(b, seg.base); err == nil && len(entries) > 0 {
			return entries[len(entries)-1].seq + 1, true
		}
	}
	return 0, false
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

// logHeader is what checkLogHeader found.
type logHeader struct {
	// damage reports a header that is damaged; intact then says whether
	// the first record checks out under the base in the file name, in
	// which case only the header is damaged (it carries nothing the name
	// does not).
	damage error
	intact bool
	// compacted says the header is a compacted segment's (version 2).
	compacted bool
}

// checkLogHeader reads the header of seg's log. err is an I/O failure or a
// format version this code does not know. A damaged header whose records
// are intact is logged here.
func (l *Log) checkLogHeader(seg *segment, f file, size int64) (logHeader, error) {
	head := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil && err != io.EOF {
		return logHeader{}, fmt.Errorf("diskqueue: open: read %s: %w", seg.path(logSuffix), err)
	}
	got, compacted, herr := decodeSegmentHeader(head, magicLog)
	if herr == nil && got != seg.base {
		herr = fmt.Errorf("%w: header has base %d, file name says %d", ErrCorrupt, got, seg.base)
	}
	if errors.Is(herr, ErrUnsupportedVersion) {
		return logHeader{}, fmt.Errorf("%s: %w", seg.path(logSuffix), herr)
	}
	if herr == nil {
		return logHeader{intact: true, compacted: compacted}, nil
	}
	h, _, _, ferr := l.readFrameAt(f, fileHeaderSize, size)
	intact := size >= fileHeaderSize && ferr == nil && h.seq == seg.base
	if intact {
		l.logger.Warn("diskqueue: segment header is damaged but its records are intact; using the base in its name", "segment", seg.base, "err", herr)
	}
	return logHeader{damage: herr, intact: intact}, nil
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

// headerOK reports whether f starts with a version 1 header of the
// wanted kind for the segment at base.
func (l *Log) headerOK(f file, magic [4]byte, base uint64) bool {
	ok, compacted := l.segmentHeaderOK(f, magic, base)
	return ok && !compacted
}

// segmentHeaderOK is headerOK for a sealed segment's log or index, which
// may be a compacted one's: it also says which.
func (l *Log) segmentHeaderOK(f file, magic [4]byte, base uint64) (ok, compacted bool) {
	head := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil {
		return false, false
	}
	got, compacted, err := decodeSegmentHeader(head, magic)
	return err == nil && got == base, compacted
}

// recoverTail repairs the last segment, the only one that can hold bytes
// that were never synced, and readies the writer to append to it.
//
// The sequence index says where the last records start, so only the records
// after its last entry that checks out are scanned; a missing index costs a
// scan of this one segment, never of the whole log. A torn final record
// (cut short, zeros, or a bad checksum with nothing valid after it) is cut
// off: no Put of it returned. A bad record with valid records after it is
// damage, not a torn write: it stays, and readers skip it; so do bad
// records that fill the log exactly to its end (wholeFrames), which were
// written whole.
func (l *Log) recoverTail(seg *segment, size int64) (*tail, error) {
	log := seg.files.Load().log // opened by openSegment
	if l.readOnly {
		return nil, l.viewTail(seg, log, size)
	}
	w := &tail{seg: seg, maxTime: l.lastMaxTime}
	var err error
	open := func(suffix string) (file, error) {
		return l.fs.OpenFile(seg.path(suffix), os.O_RDWR|os.O_CREATE, l.opts.FileMode)
	}
	closeAll := func() {
		for _, f := range []file{w.log.f, w.index.f, w.timeIdx.f} {
			if f != nil {
				f.Close()
			}
		}
	}
	if w.log.f, err = open(logSuffix); err != nil {
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	if w.index.f, err = open(indexSuffix); err != nil {
		closeAll()
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	if w.timeIdx.f, err = open(timeIndexSuffix); err != nil {
		closeAll()
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	seg.setFiles(log, index)
	t, err := l.recoverTailFiles(w, seg, log, size)
	if err != nil {
		closeAll()
		return nil, err
	}
	return t, nil
}

// recoverTailFiles is recoverTail once the files are open.
func (l *Log) recoverTailFiles(w *tail, seg *segment, log file, size int64) (*tail, error) {
	wIndex, wLog, wTime := w.index.f, w.log.f, w.timeIdx.f
	// A prefix of acknowledged records freed in place (punch.go) reads as
	// zeros, which the index's entries of them point into.
	keptOff, keptSeq, punched, _ := l.punchedPrefix(log, seg.base, size)
	punched = punched && keptOff > 0
	if punched {
		seg.keptFrom.Store(keptSeq)
	}
	// Index entries, and the last one that points at its record.
	indexSize := fileSize(wIndex)
	entries := int64(0)
	indexDamaged := false
	if l.headerOK(wIndex, magicIndex, seg.base) {
		entries = writtenEntries(wIndex, indexEntriesIn(indexSize), indexEntrySize)
	} else if indexSize > 0 {
		indexDamaged = true
	}
	entry := checkedEntry(l, wIndex, log, seg.base, size)
	trusted, entriesSuspect := trustedEntries(entry, entries, keptSeq-seg.base, punched)

	// Time-index entries kept: those for records the index vouches for.
	// Only the end of the file is read, so Open does not grow with the
	// segment; SeekTime checks the rest when it reads the file.
	tEntries, tFirst, terr := readTimeTail(wTime, seg.base, func(e timeEntry) bool {
		return trusted >= 0 && e.seq <= seg.base+uint64(trusted)
	})
	if terr != nil {
		tEntries, tFirst = nil, 0
		indexDamaged = indexDamaged || fileSize(wTime) > 0
	}
	tKept := tFirst + int64(len(tEntries)) // entries kept in the file

	// Scan from the earlier of the last trusted index entry and the last
	// kept time entry: the time index needs the offsets after its entry.
	b := indexBuilder{maxTime: w.maxTime, lastTimeSeq: maxSeq}
	startSeq, startOff := seg.base, int64(fileHeaderSize)
	if trusted >= 0 {
		startSeq = seg.base + uint64(trusted)
		if n := len(tEntries); n > 0 {
			startSeq = tEntries[n-1].seq
			b.maxTime = max(b.maxTime, tEntries[n-1].maxTime)
			b.lastTimeSeq = tEntries[n-1].seq
		}
		startOff, _ = entry(int64(startSeq - seg.base))
		b.lastTimeOff = startOff
	} else if punched {
		startSeq, startOff = keptSeq, keptOff
	}
	keepIndex := int64(startSeq - seg.base) // index entries before startSeq are kept
	goodEnd, end, err := l.scanTail(log, wIndex, seg.base, seg.base+uint64(entries), startOff, startSeq, size, b.add,
		func(off int64, first, count uint64, whole bool) {
			if whole {
				// Closed whole, then damaged at rest: not a torn write.
				l.logger.Warn("diskqueue: damaged records at the end of the last segment, which ends where they do (written whole); keeping them for readers to skip", "segment", seg.base, "offset", off, "first_seq", first, "records", count)
			} else {
				l.logger.Warn("diskqueue: damaged records in the last segment; keeping them for readers to skip", "segment", seg.base, "offset", off, "first_seq", first, "records", count)
			}
			b.damaged(off, count)
		})
	if err != nil {
		return nil, fmt.Errorf("diskqueue: open: recover %s: %w", seg.path(logSuffix), err)
	}
	if goodEnd < size {
		if err := l.cutTail(seg, wLog, goodEnd, size); err != nil {
			return nil, err
		}
	}

	// Rewrite the index tail and the time-index tail.
	gotEntries := keepIndex + indexEntriesIn(fileHeaderSize+int64(len(b.idx)))
	if entriesSuspect && (gotEntries != entries || !entriesStored(wIndex, keepIndex, b.idx)) {
		indexDamaged = true
	}
	if indexDamaged || gotEntries != entries {
		if indexDamaged || gotEntries > entries {
			l.indexRebuilds.Add(1)
			l.logger.Warn("diskqueue: rebuilt index entries from the log", "segment", seg.base, "entries_found", entries, "records", gotEntries)
		}
	}
	idx := b.idx
	idxAt := indexEntryAt(keepIndex)
	if keepIndex == 0 || trusted < 0 {
		// Rebuilt whole; the entries of records freed in place (punched)
		// are zeros.
		idx = append(append(appendFileHeader(nil, magicIndex, seg.base), make([]byte, keepIndex*indexEntrySize)...), idx...)
		idxAt = 0
	}
	if err := rewriteTail(wIndex, idxAt, idx); err != nil {
		return nil, fmt.Errorf("diskqueue: open: rewrite %s: %w", seg.path(indexSuffix), err)
	}
	// The scan re-derived the entry at startSeq; keep the stored one, and
	// write only what follows the entries kept.
	if len(tEntries) > 0 && len(b.tidx) >= timeIndexEntrySize && binary.BigEndian.Uint64(b.tidx[8:]) == tEntries[len(tEntries)-1].seq {
		b.tidx = b.tidx[timeIndexEntrySize:]
	}
	tidxAt := fileHeaderSize + tKept*timeIndexEntrySize
	tidx := b.tidx
	if terr != nil {
		tidxAt, tidx = 0, append(appendFileHeader(nil, magicTimeIndex, seg.base), b.tidx...)
	}
	if err := rewriteTail(wTime, tidxAt, tidx); err != nil {
		return nil, fmt.Errorf("diskqueue: open: rewrite %s: %w", seg.path(timeIndexSuffix), err)
	}
	timeIndexSize := tidxAt + int64(len(tidx))

	w.size, w.end = goodEnd, end
	w.indexSize = indexBytesFor(gotEntries)
	w.timeSize = timeIndexSize
	w.maxTime = b.maxTime
	w.lastTimeOff, w.lastTimeSeq = b.lastTimeOff, b.lastTimeSeq
	seg.setExtent(goodEnd, end)
	seg.maxTime.Store(b.maxTime)
	seg.indexBytes.Store(w.indexSize)
	seg.timeIndexBytes.Store(w.timeSize)
	seg.writing.Store(true)
	return w, nil
}

// entriesStored reports whether the index holds exactly idx from entry
// from on: a tail whose last entries point at records kept as damage
// reads as damaged to the check of each entry against its record, though
// it is what a rebuild writes (so it is neither counted nor rewritten).
func entriesStored(index file, from int64, idx []byte) bool {
	got := make([]byte, len(idx))
	n, _ := index.ReadAt(got, indexEntryAt(from))
	return n == len(idx) && bytes.Equal(got, idx)
}

// checkedEntry returns a function that reads entry j of the last segment's
// index and says whether it points at its record.
func checkedEntry(l *Log, index, log file, base uint64, size int64) func(j int64) (int64, bool) {
	return func(j int64) (int64, bool) {
		off, err := readIndexEntry(index, j)
		if err != nil {
			return 0, false
		}
		h, _, _, err := l.readFrameAt(log, off, size)
		return off, err == nil && h.seq == base+uint64(j)
	}
}

// trustedEntries finds the last of the written entries of the last
// segment's index that can be believed (-1: none): the last one if it
// points at its record; else, entries being written in order, the good
// ones form a prefix (from the first record kept, when some were freed in
// place, kept: its entry was fsynced before they were), found by binary
// search. suspect says entries past it did not check out.
func trustedEntries(entry func(int64) (int64, bool), entries int64, kept uint64, punched bool) (trusted int64, suspect bool) {
	if entries == 0 {
		return -1, false
	}
	if _, ok := entry(entries - 1); ok {
		return entries - 1, false
	}
	lo, hi := int64(-1), entries-1
	if j := int64(kept); punched && j < hi {
		if _, ok := entry(j); ok {
			lo = j
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, ok := entry(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, true
}

// tailLookahead bounds the index entries the resync of the last segment
// tries after each damage, so that Open's cost does not grow with it.
const tailLookahead = 64

// scanTail scans the last segment's log from startOff, where the record
// startSeq checks out, to size: recovery's and a read-only view's policy
// on the segment scanner. Each record goes to record; damage the resync
// gets past, and damage at the end that was written whole (wholeFrames),
// goes to damaged: readers skip it. It returns where the records kept end
// and the seq after them; bytes from there to size are a torn write (or
// one in progress, to a view). index (nil: none) holds entries of seqs
// below indexEnd; base is the segment's.
func (l *Log) scanTail(log, index file, base, indexEnd uint64, startOff int64, startSeq uint64, size int64,
	record func(off int64, h recordHeader), damaged func(off int64, first, count uint64, whole bool)) (int64, uint64, error) {
	sc := newScanner(log, startOff, startSeq, size)
	sc.resync = &resyncPolicy{before: maxSeq, maxBody: resyncMaxBody(l.opts.MaxRecordBytes)}
	if index != nil {
		sc.resync.useIndex(index, base, false, indexEnd, tailLookahead)
	}
	for sc.Next() {
		if d, ok := sc.Damage(); ok {
			if d.resumed {
				damaged(d.from, d.first, d.next-d.first, false)
			}
			continue
		}
		off, h, _ := sc.Record()
		record(off, h)
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	goodEnd, end := sc.Offset(), sc.seq
	if goodEnd < size {
		if n := wholeFrames(log, goodEnd, size); n > 0 {
			damaged(goodEnd, end, n, true)
			goodEnd, end = size, end+n
		}
	}
	return goodEnd, end, nil
}

// viewTail is recoverTail for a read-only queue: the same scan (scanTail),
// resuming past damage as recovery does, finds where the last segment's
// records end without changing any file, and marks how far the index can
// be trusted (ReadAt scans the log past that).
func (l *Log) viewTail(seg *segment, log file, size int64) error {
	idx, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	if idx != nil {
		seg.setFiles(log, idx)
	}
	// Acknowledged records freed in place (punch.go) read as zeros.
	keptOff, keptSeq, punched, found := l.punchedPrefix(log, seg.base, size)
	punched = punched && found
	if punched {
		seg.keptFrom.Store(keptSeq)
	}
	var entries int64
	index := idx // nil unless its header checks out
	if idx != nil && l.headerOK(idx, magicIndex, seg.base) {
		entries = writtenEntries(idx, indexEntriesIn(fileSize(idx)), indexEntrySize)
	} else {
		index = nil
	}
	entry := checkedEntry(l, idx, log, seg.base, size)
	trusted, _ := trustedEntries(entry, entries, keptSeq-seg.base, punched)
	startSeq, startOff := seg.base, int64(fileHeaderSize)
	seg.partialIndex, seg.indexedEnd = true, seg.base
	if trusted >= 0 {
		startSeq = seg.base + uint64(trusted)
		startOff, _ = entry(trusted)
		seg.indexedEnd = startSeq + 1
	} else if punched {
		startSeq, startOff = keptSeq, keptOff
	}
	// The newest timestamp: the time index's running maximum up to the
	// trusted records, then the records scanned after them.
	maxTime := l.lastMaxTime
	if tidx, err := l.fs.OpenFile(seg.path(timeIndexSuffix), os.O_RDONLY, 0); err == nil {
		n := max(fileSize(tidx), 0)
		if n >= fileHeaderSize {
			// A live writer's time index is preallocated: zeros follow
			// what was written.
			n = fileHeaderSize + writtenEntries(tidx, (n-fileHeaderSize)/timeIndexEntrySize, timeIndexEntrySize)*timeIndexEntrySize
		}
		seg.timeIndexBytes.Store(n)
		buf := make([]byte, n)
		if _, err := tidx.ReadAt(buf, 0); err == nil || err == io.EOF {
			if entries, err := decodeTimeIndex(buf, seg.base); err == nil {
				for _, e := range entries {
					if e.seq <= startSeq {
						maxTime = max(maxTime, e.maxTime)
					}
				}
			}
		}
		tidx.Close()
	}
	// Damage is left in the log, for readers to skip and Verify to
	// report; bytes after the records that do not check out are a torn
	// write or one in progress, which Open would cut.
	extent, end, err := l.scanTail(log, index, seg.base, seg.base+uint64(entries), startOff, startSeq, size,
		func(_ int64, h recordHeader) { maxTime = max(maxTime, h.ts) },
		func(int64, uint64, uint64, bool) {})
	if err != nil {
		return fmt.Errorf("diskqueue: open: scan %s: %w", seg.path(logSuffix), err)
	}
	seg.setExtent(extent, end)
	seg.maxTime.Store(maxTime)
	if n := fileSize(idx); n >= fileHeaderSize {
		seg.indexBytes.Store(indexBytesFor(writtenEntries(idx, indexEntriesIn(n), indexEntrySize)))
	}
	return nil
}

// cutTail truncates a torn tail, first copying it to a .bad file unless it
// is all zeros (space the file system allocated but nothing wrote).
func (l *Log) cutTail(seg *segment, log file, from, size int64) error {
	tail := make([]byte, size-from)
	if _, err := log.ReadAt(tail, from); err != nil && err != io.EOF {
		return fmt.Errorf("diskqueue: open: read tail of %s: %w", seg.path(logSuffix), err)
	}
	attrs := []any{"segment", seg.base, "offset", from, "bytes", len(tail)}
	torn := !allZero(tail) // zeros alone are space preallocated for appends
	if torn {
		name := fmt.Sprintf("%s.%d%s", seg.path(logSuffix), from, badSuffix)
		if err := l.copyBytes(name, tail); err != nil {
			return fmt.Errorf("diskqueue: open: save torn tail: %w", err)
		}
		l.badFiles.Add(1)
		attrs = append(attrs, "bad_file", name)
	}
	if err := log.Truncate(from); err != nil {
		return fmt.Errorf("diskqueue: open: truncate %s: %w", seg.path(logSuffix), err)
	}
	if !l.opts.NoSync {
		if err := log.Sync(); err != nil {
			return fmt.Errorf("diskqueue: open: fsync %s: %w", seg.path(logSuffix), err)
		}
	}
	if torn {
		l.logger.Warn("diskqueue: cut a torn write off the end of the log", attrs...)
	}
	return nil
}
