package diskqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// A compaction's decision and what follows it: the marker (step 2 of the
// protocol described in compact.go), the swap on the writer goroutine
// (steps 3 to 5), and, at Open, finishing or undoing a compaction a crash
// interrupted.

// The compaction marker, NNNN.compact. Part of the on-disk format.
//
//	0       4     5          8               16             24
//	| magic | ver | reserved | base (uint64) | end (uint64) |
//	24                  32                    40                        48        52         56
//	| log bytes (int64) | index bytes (int64) | time-index bytes (int64) | crc32c | reserved |
//
// The sizes are those of the new files; the CRC covers bytes 0 to 47.
const (
	compactMarkerSize    = 56
	compactMarkerVersion = 1
)

var magicCompact = [4]byte{'S', 'Q', 'C', 'M'}

// compactMarker is what the marker says: the segment and the sizes of the
// new files that replace its own.
type compactMarker struct {
	base, end                       uint64
	logBytes, indexBytes, timeBytes int64
}

func encodeCompactMarker(m compactMarker) []byte {
	b := make([]byte, compactMarkerSize)
	copy(b[0:4], magicCompact[:])
	b[4] = compactMarkerVersion
	binary.BigEndian.PutUint64(b[8:], m.base)
	binary.BigEndian.PutUint64(b[16:], m.end)
	binary.BigEndian.PutUint64(b[24:], uint64(m.logBytes))
	binary.BigEndian.PutUint64(b[32:], uint64(m.indexBytes))
	binary.BigEndian.PutUint64(b[40:], uint64(m.timeBytes))
	binary.BigEndian.PutUint32(b[48:], crc32.Checksum(b[:48], crcTable))
	return b
}

// decodeCompactMarker checks a marker for the segment at base.
func decodeCompactMarker(b []byte, base uint64) (compactMarker, error) {
	if len(b) != compactMarkerSize {
		return compactMarker{}, fmt.Errorf("%w: compaction marker is %d bytes, want %d", ErrCorrupt, len(b), compactMarkerSize)
	}
	if [4]byte(b[0:4]) != magicCompact {
		return compactMarker{}, fmt.Errorf("%w: bad compaction marker magic %q", ErrCorrupt, b[0:4])
	}
	if got, want := binary.BigEndian.Uint32(b[48:]), crc32.Checksum(b[:48], crcTable); got != want {
		return compactMarker{}, fmt.Errorf("%w: compaction marker checksum mismatch", ErrCorrupt)
	}
	if b[4] != compactMarkerVersion {
		return compactMarker{}, fmt.Errorf("%w: compaction marker version %d (this build reads %d)", ErrUnsupportedVersion, b[4], compactMarkerVersion)
	}
	if b[5]|b[6]|b[7]|b[52]|b[53]|b[54]|b[55] != 0 {
		return compactMarker{}, fmt.Errorf("%w: reserved compaction marker bytes are not zero", ErrCorrupt)
	}
	m := compactMarker{
		base:       binary.BigEndian.Uint64(b[8:]),
		end:        binary.BigEndian.Uint64(b[16:]),
		logBytes:   int64(binary.BigEndian.Uint64(b[24:])),
		indexBytes: int64(binary.BigEndian.Uint64(b[32:])),
		timeBytes:  int64(binary.BigEndian.Uint64(b[40:])),
	}
	switch {
	case m.base != base:
		return compactMarker{}, fmt.Errorf("%w: compaction marker is for segment %d, its name says %d", ErrCorrupt, m.base, base)
	case m.end < m.base || m.end-m.base > math.MaxUint32 || m.logBytes < fileHeaderSize || m.logBytes > maxCompactedLogBytes ||
		m.indexBytes != compactedIndexBytes(int64(m.end-m.base)) || m.timeBytes < fileHeaderSize:
		return compactMarker{}, fmt.Errorf("%w: compaction marker sizes out of range", ErrCorrupt)
	}
	return m, nil
}

// commitCompaction carries out steps 2 to 5 on the writer goroutine. It
// reports whether the marker was written: from then on the new files are
// the segment's on disk (Open finishes the swap), so a later failure
// leaves them for Open and keeps this process reading the old generation,
// whose handles stay open.
func (l *Log) commitCompaction(c *compaction) (decided bool, err error) {
	seg, base := c.seg, c.seg.base
	l.segMu.RLock()
	live := slices.Contains(l.segs, seg)
	l.segMu.RUnlock()
	if !live || seg.gone.Load() {
		return false, fmt.Errorf("diskqueue: compact: %w: segment %d was deleted while it was compacted", ErrNotFound, base)
	}
	if seg.files.Load() != c.old {
		// Compactions run one at a time and nothing else replaces a
		// sealed segment's files: a broken invariant, but a harmless one.
		return false, fmt.Errorf("%w: segment %d changed while it was compacted", ErrNotCompactable, base)
	}
	if err := l.writeAtomically(l.compactMarkerPath(base), encodeCompactMarker(c.marker), nil); err != nil {
		return false, fmt.Errorf("diskqueue: compact segment %d: %w", base, err)
	}
	l.crashPoint("compact-marked")
	if err := l.swapCompacted(c); err != nil {
		seg.leftovers.Store(true)
		return true, fmt.Errorf("diskqueue: compact segment %d: %w (the next Open finishes the compaction)", base, err)
	}
	c.old.release() // the segment's own hold; Compact still has its own
	l.segMu.Lock()
	before := seg.diskBytes()
	seg.shrunk.Add(c.stats.LogBytesBefore - c.stats.LogBytesAfter)
	seg.indexBytes.Store(c.marker.indexBytes)
	seg.timeIndexBytes.Store(c.marker.timeBytes)
	l.diskBytes.Add(seg.diskBytes() - before)
	l.segMu.Unlock()
	seg.maxTime.Store(c.maxTime)
	l.compactedRecords.Add(c.stats.Removed)
	l.compactedBytes.Add(c.stats.LogBytesBefore - c.stats.LogBytesAfter)
	l.crashPoint("compact-swapped")
	// The removal needs no fsync of its own: a marker a power cut brings
	// back names files already renamed, and Open removes it. It cannot
	// come back beside the next compaction's new files: the directory
	// fsync that makes their names durable makes the removal so too (and
	// the marker's log size tells its own new log from another).
	if err := l.fs.Remove(l.compactMarkerPath(base)); err != nil {
		seg.leftovers.Store(true)
		l.logger.Warn("diskqueue: cannot remove a compaction marker; the next Open does", "segment", base, "err", err)
	}
	return true, nil
}

// swapCompacted is steps 3 and 4: under filesMu, so no first open of the
// segment's files meets a half-renamed set, it renames the new files into
// place, log first, fsyncs the directory and publishes their read handles
// as the segment's generation.
func (l *Log) swapCompacted(c *compaction) error {
	seg := c.seg
	seg.filesMu.Lock()
	defer seg.filesMu.Unlock()
	paths := l.compactPaths(seg.base)
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := l.fs.Rename(paths[i], seg.path(suffix)); err != nil {
			return err
		}
		if i == 0 {
			l.crashPoint("compact-renamed-log") // the new log in place, its indexes not yet
		}
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("fsync directory %s: %w", l.dir, err)
		}
	}
	l.crashPoint("compact-renamed")
	log, err := l.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil {
		log.Close()
		return err
	}
	seg.retired = slices.DeleteFunc(seg.retired, func(f *segFiles) bool { return f.refs.Load() <= 0 })
	seg.retired = append(seg.retired, c.old)
	seg.files.Store(newSegFiles(log, index, c.marker.logBytes, true))
	return nil
}

// discardCompaction removes a compaction's files, the marker first, so
// that a crash in between never leaves a marker with some of them.
func (l *Log) discardCompaction(base uint64) {
	if err := l.fs.Remove(l.compactMarkerPath(base)); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("diskqueue: cannot remove a compaction marker", "segment", base, "err", err)
		return
	}
	for _, p := range l.compactPaths(base) {
		if err := l.fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.logger.Warn("diskqueue: cannot remove a compaction's file", "file", p, "err", err)
		}
	}
}

// finishCompactions runs at Open, before the segments are looked at: names
// are the entries of the directory that end in compactSuffix. A segment
// with a marker gets the compaction finished (or, if its new log is not
// the one the marker names, undone); without one, the new files are
// removed. A read-only view changes nothing: it reads what the names hold.
func (l *Log) finishCompactions(names []string) error {
	if len(names) == 0 || l.readOnly {
		return nil
	}
	marked := map[uint64]bool{}
	var bases []uint64
	for _, name := range names {
		base, ok := parseSegmentName(name, compactSuffix)
		if ok {
			marked[base] = true
		}
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			if !ok {
				base, ok = parseSegmentName(name, suffix+compactSuffix)
			}
		}
		if !ok {
			l.logger.Warn("diskqueue: leaving an unknown file alone", "file", name)
			continue
		}
		if !slices.Contains(bases, base) {
			bases = append(bases, base)
		}
	}
	for _, base := range bases {
		if err := l.finishCompaction(base, marked[base]); err != nil {
			return fmt.Errorf("diskqueue: open: finish the compaction of segment %d: %w", base, err)
		}
	}
	return nil
}

// finishCompaction finishes or undoes one interrupted compaction.
func (l *Log) finishCompaction(base uint64, marked bool) error {
	paths := l.compactPaths(base)
	logName := segmentName(base, logSuffix)
	_, haveLog := l.listing[logName]
	forward := marked && haveLog
	if forward {
		b, err := readFile(l.fs, l.compactMarkerPath(base))
		if err != nil {
			return err
		}
		m, err := decodeCompactMarker(b, base)
		if err != nil {
			// The marker exists, so every new file was whole and durable
			// before it was written: finish anyway.
			l.logger.Warn("diskqueue: compaction marker is damaged; finishing the compaction it stands for", "segment", base, "err", err)
		} else if info, err := l.fs.Stat(paths[0]); err == nil && info.Size() != m.logBytes {
			l.logger.Warn("diskqueue: a compaction's new log is not the one its marker names; keeping the old segment", "segment", base, "bytes", info.Size(), "want", m.logBytes)
			forward = false
		}
	}
	if !forward {
		l.discardCompaction(base)
		return nil
	}
	renamed := false
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		err := l.fs.Rename(paths[i], filepath.Join(l.dir, segmentName(base, suffix)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			// Renamed before the crash.
		case err != nil:
			return err
		default:
			renamed = true
		}
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	if info, err := l.fs.Stat(filepath.Join(l.dir, logName)); err == nil {
		l.listing[logName] = fs.FileInfoToDirEntry(info)
	}
	if err := l.fs.Remove(l.compactMarkerPath(base)); err != nil {
		return err
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	if renamed {
		l.logger.Warn("diskqueue: finished a compaction a crash interrupted", "segment", base)
	}
	return nil
}
