package diskqueue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
)

// The sequence index: per segment, one fixed-width entry (the record's log
// offset) per record, so any record is one index read and one log read
// away. It is derived data: rebuilt from the log when missing or wrong.

// The index's arithmetic, in one place: entry i (the record base+i) is the
// big-endian uint32 log offset at indexEntryAt(i).

// indexRemoved marks, in a compacted segment's index (format version 2),
// the entry of a record compaction removed. Its other 31 bits hold the
// offset of the next record kept (the log's size if none is), so the entry
// before it still bounds its record's frame, and a reader looking for a
// removed seq starts where the next record kept does. A compacted log is
// smaller than 2 GiB, so no offset in it has this bit; in a segment never
// compacted (version 1) the bit is part of the offset.
const indexRemoved = 1 << 31

// indexOffset decodes an index entry: the record's log offset and, in a
// compacted segment's index, whether compaction removed the record (the
// offset is then the next record kept's).
func indexOffset(e uint32, compacted bool) (off int64, removed bool) {
	if compacted && e&indexRemoved != 0 {
		return int64(e &^ indexRemoved), true
	}
	return int64(e), false
}

// indexEntryAt is the byte offset of entry i in an index file.
func indexEntryAt(i int64) int64 { return fileHeaderSize + i*indexEntrySize }

// indexBytesFor is the size of an index file holding n entries.
func indexBytesFor(n int64) int64 { return indexEntryAt(n) }

// indexChecksumSize is the trailer of a compacted segment's index (format
// version 2): the CRC-32C of the header and every entry, checked when the
// segment's files are first opened. A version-1 entry is checked by the
// record it points at; a removed record's entry points at no record of its
// own, so the file carries the check.
const indexChecksumSize = 4

// compactedIndexBytes is the size of a compacted segment's index of n
// entries.
func compactedIndexBytes(n int64) int64 { return indexBytesFor(n) + indexChecksumSize }

// encodeCompactedIndex is the whole index file of the compacted segment
// at base whose entries are idx: header (version 2), entries, checksum.
func encodeCompactedIndex(base uint64, idx []byte) []byte {
	return appendIndexChecksum(append(appendFileHeaderVersion(nil, magicIndex, formatVersionCompacted, base), idx...))
}

// appendIndexChecksum appends the trailer of a compacted segment's index
// whose header and entries are b.
func appendIndexChecksum(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// indexChecksumOK reports whether b, a whole compacted index file, ends
// with the checksum of what comes before.
func indexChecksumOK(b []byte) bool {
	n := len(b) - indexChecksumSize
	return n >= fileHeaderSize && binary.BigEndian.Uint32(b[n:]) == crc32.Checksum(b[:n], crcTable)
}

// indexEntriesIn is how many whole entries an index file of size bytes has
// room for.
func indexEntriesIn(size int64) int64 { return max(size-fileHeaderSize, 0) / indexEntrySize }

// readIndexEntry reads entry i of an index file: a record's log offset.
func readIndexEntry(f file, i int64) (int64, error) {
	var e [indexEntrySize]byte
	if _, err := f.ReadAt(e[:], indexEntryAt(i)); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint32(e[:])), nil
}

// decodeIndexEntry is entry i of an index file's bytes b, and whether b
// holds it.
func decodeIndexEntry(b []byte, i int64) (int64, bool) {
	at := indexEntryAt(i)
	if at+indexEntrySize > int64(len(b)) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint32(b[at:])), true
}

// indexEntries reads count consecutive index entries starting at seq's,
// from the generation f of seg's files (raw: see indexOffset).
func (l *Log) indexEntries(seg *segment, f *segFiles, seq uint64, count int) ([]uint32, error) {
	out := make([]uint32, count)
	_, m := f.mapsForLookup(l, seg)
	if err := l.readIndexEntries(seg, f, m, seq, out); err != nil {
		return nil, err
	}
	return out, nil
}

// readIndexEntries is indexEntries into out, len(out) entries, from m,
// f's index mapping (nil: pread): ReadAt's two fit on its stack.
func (l *Log) readIndexEntries(seg *segment, f *segFiles, m []byte, seq uint64, out []uint32) error {
	count := len(out)
	if f.index == nil || (seg.partialIndex && seq+uint64(count) > seg.indexedEnd) {
		return fmt.Errorf("%w: segment %d has no index entry for seq %d", ErrCorrupt, seg.base, seq)
	}
	n := count * indexEntrySize
	at := indexEntryAt(int64(seq - seg.base))
	// A stack buffer for the mapping; the one given to ReadAt, an
	// interface's method, goes to the heap, and so would anything it
	// might alias.
	var small [2 * indexEntrySize]byte
	var buf []byte
	if n <= len(small) && copyMapped(small[:n], m, at) {
		buf = small[:n]
	} else if big := make([]byte, n); n > len(small) && copyMapped(big, m, at) {
		buf = big // (a small read whose copy failed would fail again)
	} else {
		if _, err := f.index.ReadAt(big, at); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
			}
			return fmt.Errorf("diskqueue: read %s at %d: %w", seg.path(indexSuffix), at, err)
		}
		buf = big
	}
	for i := range out {
		out[i] = binary.BigEndian.Uint32(buf[i*indexEntrySize:])
	}
	return nil
}

// indexBuilder derives index and time-index entries from records in log
// order, with the same rules the writer follows.
type indexBuilder struct {
	idx, tidx   []byte
	maxTime     int64
	lastTimeOff int64
	lastTimeSeq uint64 // maxSeq until the segment has an entry
	// pending counts the entries at the end of idx for removed records
	// (a compacted segment's) still waiting for the next offset.
	pending int
}

func (b *indexBuilder) add(off int64, h recordHeader) {
	b.fillRemoved(off)
	b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(off))
	b.maxTime = max(b.maxTime, h.ts)
	if b.lastTimeSeq == maxSeq || off-b.lastTimeOff >= timeIndexIntervalBytes {
		b.tidx = appendTimeEntry(b.tidx, b.maxTime, h.seq)
		b.lastTimeOff, b.lastTimeSeq = off, h.seq
	}
}

// damaged gives index entries to records that cannot be decoded, all
// pointing at the damage, so the index keeps one entry per seq and readers
// find the damage (and skip it) rather than a wrong record.
func (b *indexBuilder) damaged(off int64, count uint64) {
	b.fillRemoved(off)
	for ; count > 0; count-- {
		b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(off))
	}
}

// removed gives index entries to count records compaction removed: each
// marked indexRemoved, with the offset of whatever comes next (the next
// record added, damage, or the log's end given to fillRemoved).
func (b *indexBuilder) removed(count uint64) {
	for ; count > 0; count-- {
		b.idx = binary.BigEndian.AppendUint32(b.idx, indexRemoved)
		b.pending++
	}
}

// fillRemoved completes the pending removed entries with off, the offset
// that follows them.
func (b *indexBuilder) fillRemoved(off int64) {
	n := len(b.idx) / indexEntrySize
	for i := n - b.pending; i < n; i++ {
		binary.BigEndian.PutUint32(b.idx[i*indexEntrySize:], indexRemoved|uint32(off))
	}
	b.pending = 0
}

// finish completes the entries of a segment of size log bytes whose
// records end at end: the pending removed ones point at the end of the
// log, and the time index gets its entry for the last seq.
func (b *indexBuilder) finish(size int64, base, end uint64) {
	b.fillRemoved(size)
	if b.lastTimeSeq != end-1 && end > base {
		b.tidx = appendTimeEntry(b.tidx, b.maxTime, end-1)
		b.lastTimeSeq = end - 1
	}
}

// rebuildIndexes rewrites a sealed segment's index and time index from its
// log, atomically (temporary file, fsync, rename). Damaged records keep an
// entry pointing at the damage. In a compacted segment's log (compacted)
// the seqs a frame skips are removed records, and their entries are
// marked so (indexRemoved).
//
// It runs at Open or, from acquireFiles, while the queue is in use: it
// touches no writer state, and the time index it writes holds the running
// maximum within the segment (SeekTime takes the maximum across segments
// itself).
func (l *Log) rebuildIndexes(seg *segment, log file, compacted bool) error {
	end, size := seg.endNow(), seg.sizeNow()
	b := indexBuilder{lastTimeSeq: maxSeq}
	sc := newScanner(log, fileHeaderSize, seg.base, size)
	if compacted {
		sc.allowGaps(end)
	}
	// The index is what is rebuilt: the resync searches the log.
	sc.resync = &resyncPolicy{before: end, maxBody: resyncMaxBody(l.opts.MaxRecordBytes)}
	cleanEnd := true // the scan ended at the log's end, not at damage
	for next := sc.seq; sc.Next(); next = sc.seq {
		if d, ok := sc.Damage(); ok {
			if d.next > d.first { // (damage past the segment's end holds none of its seqs)
				b.damaged(d.from, d.next-d.first)
			}
			cleanEnd = d.resumed
			continue
		}
		off, h, _ := sc.Record()
		b.removed(h.seq - next)
		b.add(off, h)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("diskqueue: open: rebuild index of %s: %w", seg.path(logSuffix), err)
	}
	if n := uint64(len(b.idx) / indexEntrySize); n != end-seg.base {
		// The log holds more records than its neighbour's base allows, or
		// fewer were found: keep exactly the segment's count. In a
		// compacted log, seqs after the last record kept were removed.
		want := int((end - seg.base) * indexEntrySize)
		switch {
		case len(b.idx) > want:
			b.idx = b.idx[:want]
			b.pending = min(b.pending, want/indexEntrySize)
		case compacted && cleanEnd:
			b.removed((end - seg.base) - n)
		default:
			b.damaged(size, (end-seg.base)-n)
		}
	}
	b.finish(size, seg.base, end)
	index := appendFileHeader(nil, magicIndex, seg.base)
	if compacted {
		index = encodeCompactedIndex(seg.base, b.idx)
		b.idx = nil
	}
	if err := l.writeAtomically(seg.path(indexSuffix), index, b.idx); err != nil {
		return err
	}
	if err := l.writeAtomically(seg.path(timeIndexSuffix), appendFileHeader(nil, magicTimeIndex, seg.base), b.tidx); err != nil {
		return err
	}
	seg.indexBytes.Store(int64(len(index) + len(b.idx)))
	seg.timeIndexBytes.Store(int64(fileHeaderSize + len(b.tidx)))
	seg.maxTime.Store(b.maxTime)
	l.indexRebuilds.Add(1)
	l.logger.Warn("diskqueue: rebuilt the indexes of a sealed segment from its log", "segment", seg.base)
	return nil
}

// RebuildIndexes checks the indexes and time index of every sealed
// segment whose files are not open yet and rebuilds from its log each that
// is missing or damaged (a bad header, size or shape), as the segment's
// first use after Open would: Open leaves sealed segments for then, so
// that it does not grow with the log, and a repair right after Open finds
// all of them unopened. An entry damaged in place is not found this way
// (Verify reports it; readers check every record). It returns how many it
// rebuilt, also counted in Stats.IndexRebuilds, and ErrClosed if the log
// closes meanwhile. `spillq repair` calls it; a read-only view rebuilds
// nothing.
func (l *Log) RebuildIndexes(ctx context.Context) (int, error) {
	if l.readOnly {
		return 0, ErrReadOnly
	}
	before := l.indexRebuilds.Load()
	rebuilt := func() int { return int(l.indexRebuilds.Load() - before) }
	l.segMu.RLock()
	segs := slices.Clone(l.segs)
	l.segMu.RUnlock()
	for _, seg := range segs {
		if l.isClosed.Load() {
			return rebuilt(), ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return rebuilt(), err
		}
		if seg.gone.Load() || seg.writing.Load() {
			continue // a tombstone; the active segment, which Open recovered
		}
		f, err := l.acquireFiles(seg)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile, every record acknowledged, or closed (above)
		}
		if err != nil {
			return rebuilt(), fmt.Errorf("diskqueue: rebuild indexes: %w", err)
		}
		f.release()
	}
	if l.isClosed.Load() {
		return rebuilt(), ErrClosed
	}
	return rebuilt(), nil
}

// writtenEntries returns how many of the count fixed-size entries after a
// file's header were written. A preallocated file has zeros after them, and
// no written entry is all zeros (an index entry is an offset past the
// header, a time entry holds a timestamp). Entries are written in order, so
// the written ones are a prefix and a binary search finds its end; a
// read error counts as the end.
func writtenEntries(f file, count, size int64) int64 {
	written := func(j int64) bool {
		e := make([]byte, size)
		if _, err := f.ReadAt(e, fileHeaderSize+j*size); err != nil {
			return false
		}
		return !allZero(e)
	}
	if count == 0 || written(count-1) {
		return count
	}
	lo, hi := int64(-1), count-1 // entry lo is written (or -1), hi is not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if written(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
