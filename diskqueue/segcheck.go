package diskqueue

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Opening the segments Open found: sealed ones lazily, the last (and any a
// crash may have left unsealed) with their headers checked, and those with
// an unreadable header set aside.

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
