package diskqueue

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// The scan of the last segment's tail, shared by Open's repair of it
// (tailrepair.go) and a read-only view's open of it (viewTail): the only
// segment that can hold bytes never synced, so the one whose end is found
// by reading it.

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
	// The entries written, found once: they size the index in Stats too.
	idxSize, written := fileSize(idx), int64(0)
	if idxSize >= fileHeaderSize {
		written = writtenEntries(idx, indexEntriesIn(idxSize), indexEntrySize)
	}
	var entries int64
	index := idx // nil unless its header checks out
	if idx != nil && l.headerOK(idx, magicIndex, seg.base) {
		entries = written
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
	if idxSize >= fileHeaderSize {
		seg.indexBytes.Store(indexBytesFor(written))
	}
	return nil
}
