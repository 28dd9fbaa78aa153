package diskqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// indexBuilder derives index and time-index entries from records in log
// order, with the same rules the writer follows.
type indexBuilder struct {
	idx, tidx   []byte
	maxTime     int64
	lastTimeOff int64
	lastTimeSeq uint64 // maxSeq until the segment has an entry
}

func (b *indexBuilder) add(off int64, h recordHeader) {
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
	for ; count > 0; count-- {
		b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(off))
	}
}

// resync looks for the next frame that checks out after damage at off,
// trying every byte offset, for a seq in (after, before). A cheap test of
// the seq field comes before the checksum, so this costs little more than a
// read of the bytes. It is used only where no index can say where the next
// record starts.
func resync(w *window, off, limit int64, after, before uint64, maxBody int) (int64, uint64, bool) {
	for p := off + 1; p+recordHeaderSize <= limit; p++ {
		head, err := w.bytesAt(p, recordHeaderSize, limit)
		if err != nil {
			return 0, 0, false
		}
		seq := binary.BigEndian.Uint64(head[9:17])
		if seq <= after || seq >= before {
			continue
		}
		if h, _, _, err := w.frameAt(p, limit, maxBody); err == nil && h.seq == seq {
			return p, seq, true
		}
	}
	return 0, 0, false
}

// rebuildIndexes rewrites a sealed segment's index and time index from its
// log, atomically (temporary file, fsync, rename). Damaged records keep an
// entry pointing at the damage.
//
// It runs at Open or, from segFiles, while the queue is in use: it touches
// no writer state, and the time index it writes holds the running maximum
// within the segment (SeekTime takes the maximum across segments itself).
func (l *Log) rebuildIndexes(seg *segment, log file) error {
	maxBody := maxBodyForRead(l.opts.MaxRecordBytes)
	end, size := seg.endNow(), seg.sizeNow()
	b := indexBuilder{lastTimeSeq: maxSeq}
	sc := newScanner(log, fileHeaderSize, seg.base, size, maxBody)
	for {
		for sc.Next() {
			off, h, _ := sc.Record()
			b.add(off, h)
		}
		if sc.Err() == nil || sc.seq >= end {
			break
		}
		if !errors.Is(sc.Err(), ErrCorrupt) && !errors.Is(sc.Err(), errShortFrame) {
			return fmt.Errorf("diskqueue: open: rebuild index of %s: %w", seg.path(logSuffix), sc.Err())
		}
		off, seq, ok := resync(&sc.win, sc.off, size, sc.seq, end, maxBody)
		if !ok {
			b.damaged(sc.off, end-sc.seq)
			break
		}
		b.damaged(sc.off, seq-sc.seq)
		sc = newScanner(log, off, seq, size, maxBody)
	}
	if n := uint64(len(b.idx) / indexEntrySize); n != end-seg.base {
		// The log holds more records than its neighbour's base allows, or
		// fewer were found: keep exactly the segment's count.
		want := int((end - seg.base) * indexEntrySize)
		if len(b.idx) > want {
			b.idx = b.idx[:want]
		} else {
			b.damaged(size, (end-seg.base)-n)
		}
	}
	if b.lastTimeSeq != end-1 && end > seg.base {
		b.tidx = appendTimeEntry(b.tidx, b.maxTime, end-1)
	}
	if err := l.writeAtomically(seg.path(indexSuffix), appendFileHeader(nil, magicIndex, seg.base), b.idx); err != nil {
		return err
	}
	if err := l.writeAtomically(seg.path(timeIndexSuffix), appendFileHeader(nil, magicTimeIndex, seg.base), b.tidx); err != nil {
		return err
	}
	seg.indexBytes.Store(int64(fileHeaderSize + len(b.idx)))
	seg.timeIndexBytes.Store(int64(fileHeaderSize + len(b.tidx)))
	seg.maxTime.Store(b.maxTime)
	l.indexRebuilds.Add(1)
	l.logger.Warn("diskqueue: rebuilt the indexes of a sealed segment from its log", "segment", seg.base)
	return nil
}

// writeAtomically replaces path with header+body: temporary file, fsync,
// rename, directory fsync.
func (l *Log) writeAtomically(path string, header, body []byte) error {
	tmp := path + tmpSuffix
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	_, err = f.WriteAt(append(header, body...), 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, path)
	}
	if err == nil && !l.opts.NoSync {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		l.fs.Remove(tmp)
		return fmt.Errorf("diskqueue: open: write %s: %w", path, err)
	}
	return nil
}

// recoverTail repairs the last segment, the only one that can hold bytes
// that were never synced, and readies the writer to append to it.
//
// The sequence index says where the last records start, so only the records
// after its last entry that checks out are scanned; a missing index costs a
// scan of this one segment, never of the whole log. A torn final record
// (cut short, zeros, or a bad checksum with nothing valid after it) is cut
// off: with SyncEvery 1 no Put of it returned, and with any other policy it
// was never promised to survive a crash. A bad record with valid records
// after it is damage, not a torn write: it stays, and readers skip it.
func (l *Log) recoverTail(seg *segment, size int64) (*tail, error) {
	maxBody := maxBodyForRead(l.opts.MaxRecordBytes)
	log := seg.files.Load().log // opened by openSegment
	if l.readOnly {
		return nil, l.scanTail(seg, log, size)
	}
	w := &tail{seg: seg, maxTime: l.lastMaxTime}
	var err error
	open := func(suffix string) (file, error) {
		return l.fs.OpenFile(seg.path(suffix), os.O_RDWR|os.O_CREATE, 0o644)
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
	t, err := l.recoverTailFiles(w, seg, log, size, maxBody)
	if err != nil {
		closeAll()
		return nil, err
	}
	return t, nil
}

// recoverTailFiles is recoverTail once the files are open.
func (l *Log) recoverTailFiles(w *tail, seg *segment, log file, size int64, maxBody int) (*tail, error) {
	wIndex, wLog, wTime := w.index.f, w.log.f, w.timeIdx.f
	// Index entries, and the last one that points at its record.
	indexSize := fileSize(wIndex)
	entries := int64(0)
	indexDamaged := false
	if l.headerOK(wIndex, magicIndex, seg.base) {
		entries = writtenEntries(wIndex, (indexSize-fileHeaderSize)/indexEntrySize, indexEntrySize)
	} else if indexSize > 0 {
		indexDamaged = true
	}
	entry := func(j int64) (int64, bool) {
		var e [indexEntrySize]byte
		if _, err := wIndex.ReadAt(e[:], fileHeaderSize+j*indexEntrySize); err != nil {
			return 0, false
		}
		off := int64(binary.BigEndian.Uint32(e[:]))
		h, _, _, err := l.readFrameAt(log, off, size)
		return off, err == nil && h.seq == seg.base+uint64(j)
	}
	trusted := int64(-1) // entries [0, trusted] are believed
	if entries > 0 {
		if _, ok := entry(entries - 1); ok {
			trusted = entries - 1
		} else {
			// Entries are written in order, so the good ones form a prefix.
			lo, hi := int64(-1), entries-1
			for hi-lo > 1 {
				mid := (lo + hi) / 2
				if _, ok := entry(mid); ok {
					lo = mid
				} else {
					hi = mid
				}
			}
			trusted = lo
			indexDamaged = true
		}
	}

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
	}
	keepIndex := int64(startSeq - seg.base) // index entries before startSeq are kept
	sc := newScanner(log, startOff, startSeq, size, maxBody)
	goodEnd := startOff
	for {
		for sc.Next() {
			off, h, _ := sc.Record()
			b.add(off, h)
		}
		goodEnd = sc.Offset()
		if sc.Err() == nil {
			break
		}
		if !errors.Is(sc.Err(), ErrCorrupt) && !errors.Is(sc.Err(), errShortFrame) {
			return nil, fmt.Errorf("diskqueue: open: recover %s: %w", seg.path(logSuffix), sc.Err())
		}
		// Valid records after the bad one mean damage inside the log, not
		// a torn tail. Looking 64 index entries ahead bounds Open's cost.
		const lookahead = 64
		stop := min(seg.base+uint64(entries), sc.seq+1+lookahead)
		off, seq, ok := l.resumeAfter(seg.base, log, wIndex, sc.Offset(), sc.seq, size, stop)
		if !ok {
			break
		}
		l.logger.Warn("diskqueue: damaged records in the last segment; keeping them for readers to skip", "segment", seg.base, "offset", sc.Offset(), "first_seq", sc.seq, "records", seq-sc.seq)
		b.damaged(sc.Offset(), seq-sc.seq)
		sc = newScanner(log, off, seq, size, maxBody)
	}
	end := sc.seq
	if goodEnd < size {
		if err := l.cutTail(seg, wLog, goodEnd, size); err != nil {
			return nil, err
		}
	}

	// Rewrite the index tail and the time-index tail.
	gotEntries := keepIndex + int64(len(b.idx)/indexEntrySize)
	if indexDamaged || gotEntries != entries {
		if indexDamaged || gotEntries > entries {
			l.indexRebuilds.Add(1)
			l.logger.Warn("diskqueue: rebuilt index entries from the log", "segment", seg.base, "entries_found", entries, "records", gotEntries)
		}
	}
	idx := b.idx
	if keepIndex == 0 {
		idx = append(appendFileHeader(nil, magicIndex, seg.base), idx...)
	}
	idxAt := fileHeaderSize + keepIndex*indexEntrySize
	if keepIndex == 0 {
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
	w.indexSize = fileHeaderSize + gotEntries*indexEntrySize
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

// scanTail is recoverTail for a read-only queue: it finds where the last
// segment's good records end without changing any file, and marks how far
// the index can be trusted (ReadAt scans the log past that).
func (l *Log) scanTail(seg *segment, log file, size int64) error {
	maxBody := maxBodyForRead(l.opts.MaxRecordBytes)
	idx, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	if idx != nil {
		seg.setFiles(log, idx)
	}
	startSeq, startOff := seg.base, int64(fileHeaderSize)
	if idx != nil && l.headerOK(idx, magicIndex, seg.base) {
		// Walk back from the last entry to one that points at its record.
		for j := writtenEntries(idx, (fileSize(idx)-fileHeaderSize)/indexEntrySize, indexEntrySize) - 1; j >= 0; j-- {
			var e [indexEntrySize]byte
			if _, err := idx.ReadAt(e[:], fileHeaderSize+j*indexEntrySize); err != nil {
				break
			}
			off := int64(binary.BigEndian.Uint32(e[:]))
			if h, _, _, err := l.readFrameAt(log, off, size); err == nil && h.seq == seg.base+uint64(j) {
				startSeq, startOff = h.seq, off
				break
			}
		}
	}
	seg.partialIndex, seg.indexedEnd = true, startSeq+1
	if startSeq == seg.base && startOff == fileHeaderSize {
		seg.indexedEnd = seg.base
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
	sc := newScanner(log, startOff, startSeq, size, maxBody)
	for sc.Next() {
		_, h, _ := sc.Record()
		maxTime = max(maxTime, h.ts)
	}
	seg.setExtent(sc.Offset(), sc.seq)
	seg.maxTime.Store(maxTime)
	// Bytes past sc.Offset() that do not check out are a torn write or one
	// in progress; Verify reports them, and Open would cut them.
	if n := fileSize(idx); n >= fileHeaderSize {
		seg.indexBytes.Store(fileHeaderSize + writtenEntries(idx, (n-fileHeaderSize)/indexEntrySize, indexEntrySize)*indexEntrySize)
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

func allZero(b []byte) bool {
	return len(bytes.Trim(b, "\x00")) == 0
}

// copyBytes writes b to a new file name.
func (l *Log) copyBytes(name string, b []byte) error {
	f, err := l.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// timeTailEntries is how many entries from its end readTimeTail reads first:
// 4 KiB, far more than one write can leave unconfirmed.
const timeTailEntries = 256

// readTimeTail reads the last entries of a time-index file and returns
// those up to the last one keep accepts, with the position of the first
// returned entry in the file. It reads the whole file only if none of the
// last timeTailEntries is kept.
func readTimeTail(f file, base uint64, keep func(timeEntry) bool) ([]timeEntry, int64, error) {
	n := fileSize(f)
	if n < fileHeaderSize {
		return nil, 0, fmt.Errorf("%w: time index is %d bytes", ErrCorrupt, n)
	}
	head := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, 0, err
	}
	if got, err := decodeFileHeader(head, magicTimeIndex); err != nil {
		return nil, 0, err
	} else if got != base {
		return nil, 0, fmt.Errorf("%w: time index header base %d, want %d", ErrCorrupt, got, base)
	}
	count := writtenEntries(f, (n-fileHeaderSize)/timeIndexEntrySize, timeIndexEntrySize)
	for from := max(count-timeTailEntries, 0); ; from = 0 {
		buf := make([]byte, (count-from)*timeIndexEntrySize)
		if _, err := f.ReadAt(buf, fileHeaderSize+from*timeIndexEntrySize); err != nil && err != io.EOF {
			return nil, 0, err
		}
		entries, err := decodeTimeEntries(buf, base)
		if err != nil {
			return nil, 0, err
		}
		k := len(entries)
		for k > 0 && !keep(entries[k-1]) {
			k--
		}
		if k > 0 || from == 0 {
			return entries[:k], from, nil
		}
	}
}

// rewriteTail writes b at off and cuts the file there.
func rewriteTail(f file, off int64, b []byte) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Truncate(off + int64(len(b)))
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
