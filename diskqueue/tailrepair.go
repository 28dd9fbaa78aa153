package diskqueue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Repair of the last segment at Open: its torn tail cut off, its index and
// time-index tails rewritten, the writer readied to append after it.

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
	// In the order of regions.
	for i, suffix := range [3]string{logSuffix, indexSuffix, timeIndexSuffix} {
		f, err := l.fs.OpenFile(seg.path(suffix), os.O_RDWR|os.O_CREATE, l.opts.FileMode)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("diskqueue: open: %w", err)
		}
		w.regions()[i].f = f
	}
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	seg.setFiles(log, index)
	t, err := l.recoverTailFiles(w, seg, log, size)
	if err != nil {
		w.close()
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
