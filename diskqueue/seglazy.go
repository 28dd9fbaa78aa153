package diskqueue

import (
	"errors"
	"fmt"
	"math"
	"os"
)

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
	seg.indexBytes.Store(indexBytesFor(int64(next - seg.base)))
	// An entry for the first and the last record, and about one per
	// timeIndexIntervalBytes of log between them.
	seg.timeIndexBytes.Store(fileHeaderSize + (2+(size-fileHeaderSize)/timeIndexIntervalBytes)*timeIndexEntrySize)
	return nil
}

// acquireFiles returns seg's current generation of read handles, held
// (the caller releases it), opening them on first use. A failure to open
// is returned as is and tried again by the next call: it is not damage. A
// deleted segment gives ErrNotFound.
func (l *Log) acquireFiles(seg *segment) (*segFiles, error) {
	for {
		f := seg.files.Load()
		if f == nil {
			f, opened, err := l.openFiles(seg)
			if err != nil {
				return nil, err
			}
			if opened {
				// Held already, so the cache cannot give it back before
				// the caller has used it.
				l.openSegs.add(seg)
				return f, nil
			}
			continue // another call opened it meanwhile
		}
		if f.tryAcquire() {
			if !seg.used.Load() {
				seg.used.Store(true)
			}
			return f, nil
		}
		if seg.files.Load() == f {
			if f.closed.Load() {
				// Closed with the segment, not replaced by a compaction.
				return nil, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
			}
			// No reference left and not closed: the cache is giving the
			// generation back (evict, under filesMu). Once it has, the
			// next look opens the files again.
			seg.filesMu.Lock()
			seg.filesMu.Unlock() //lint:ignore SA2001 a wait for evict, which holds filesMu
		}
	}
}

// openFiles is acquireFiles when seg has no generation: under filesMu it
// opens one and returns it held for the caller, unless another call just
// did (then it returns nil and opened false).
func (l *Log) openFiles(seg *segment) (f *segFiles, opened bool, err error) {
	seg.filesMu.Lock()
	defer seg.filesMu.Unlock()
	if seg.files.Load() != nil {
		return nil, false, nil
	}
	if seg.closed {
		return nil, false, fmt.Errorf("%w: segment %d was deleted", ErrNotFound, seg.base)
	}
	if seg.evicted && !l.readOnly && !seg.leftovers.Load() {
		if f, err = l.reopenEvicted(seg); err != nil {
			return nil, false, err
		}
		f.size = seg.gaveBack.size
	} else {
		before := seg.diskBytes()
		if f, err = l.openSealed(seg); err != nil {
			return nil, false, err
		}
		// Open counted the index files at their expected sizes.
		l.diskBytes.Add(seg.diskBytes() - before)
		if f.compacted {
			// A compacted log is written whole and fsynced before it
			// is swapped in, so the file's length is the generation's
			// size. The segment's may be older: a read-only view lists
			// segments once, and another process may have compacted
			// this one since.
			if n := fileSize(f.log); n > 0 {
				f.size = n
			}
		}
	}
	f.reopened = seg.evicted
	f.refs.Store(2) // the segment's and the caller's
	seg.used.Store(true)
	seg.files.Store(f)
	return f, true, nil
}

// reopenEvicted opens the files of a segment whose generation the cache
// gave back, without openSealed's checks and stats (about half the system
// calls of a lookup that opens its segment): they were made when that
// generation was opened, and while this process holds the directory's
// lock nothing else changes a segment's files (a compaction here swaps a
// generation in, and evict notes what the generation given back was). Not
// after a compaction whose swap failed midway (leftovers): the paths may
// name its files while the generation given back was the old one. A
// read-only view cannot know either and checks each time.
func (l *Log) reopenEvicted(seg *segment) (*segFiles, error) {
	log, err := l.fs.OpenFile(seg.path(logSuffix), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("diskqueue: %w", err)
	}
	var index file
	if seg.gaveBack.indexed {
		if index, err = l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0); err != nil {
			log.Close()
			return nil, fmt.Errorf("diskqueue: %w", err)
		}
	}
	return newSegFiles(log, index, 0, seg.gaveBack.compacted), nil
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
	hdr, err := l.checkLogHeader(seg, log, seg.sizeNow())
	if err != nil {
		return fail(err)
	}
	if hdr.damage != nil && !hdr.intact {
		l.logger.Warn("diskqueue: segment header is damaged; its records are checked one by one and damaged ones skipped", "segment", seg.base, "err", hdr.damage)
	}
	count := int64(seg.endNow() - seg.base)
	timeBytes := l.statSize(seg.path(timeIndexSuffix))
	timeOK := timeBytes >= fileHeaderSize+timeIndexEntrySize && (timeBytes-fileHeaderSize)%timeIndexEntrySize == 0
	index, err := l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0)
	indexBytes := fileSize(index)
	compacted := hdr.compacted
	rebuild := false
	switch {
	case errors.Is(err, os.ErrNotExist):
		rebuild = true
	case err != nil:
		return fail(fmt.Errorf("diskqueue: %w", err))
	default:
		ok, indexCompacted := l.segmentHeaderOK(index, magicIndex, seg.base)
		if hdr.damage != nil {
			// The index says what the log's header no longer can.
			compacted = indexCompacted
		}
		// An index of the other version belongs to the other generation
		// of the log (a compaction's files renamed into place by hand). A
		// compacted one is read whole once, for its checksum.
		want := indexBytesFor(count)
		if compacted {
			want = compactedIndexBytes(count)
		}
		if !timeOK || indexBytes != want || !ok || indexCompacted != compacted || compacted && !l.indexFileOK(index, indexBytes) {
			index.Close()
			index, rebuild = nil, true
		}
	}
	seg.indexBytes.Store(max(indexBytes, 0))
	seg.timeIndexBytes.Store(max(timeBytes, 0))
	if !compacted {
		if _, seq, punched, found := l.punchedPrefix(log, seg.base, seg.sizeNow()); punched {
			seg.keptFrom.Store(seg.endNow())
			if found {
				seg.keptFrom.Store(seq)
			}
		}
	}
	if !rebuild {
		return newSegFiles(log, index, 0, compacted), nil
	}
	if l.readOnly {
		if l.deletedMeanwhile(seg) {
			// A live writer deleted it (the log first, then its indexes)
			// while this view opened it: not damage.
			return fail(fmt.Errorf("diskqueue: segment %d: %w", seg.base, os.ErrNotExist))
		}
		l.logger.Warn("diskqueue: a sealed segment's indexes are damaged (read-only: not rebuilt); lookups in it scan the log", "segment", seg.base)
		return newSegFiles(log, nil, 0, compacted), nil
	}
	if err := l.rebuildIndexes(seg, log, compacted); err != nil {
		return fail(err)
	}
	if index, err = l.fs.OpenFile(seg.path(indexSuffix), os.O_RDONLY, 0); err != nil {
		return fail(fmt.Errorf("diskqueue: %w", err))
	}
	return newSegFiles(log, index, 0, compacted), nil
}

// indexFileOK reads a compacted segment's index of size bytes whole and
// checks its checksum.
func (l *Log) indexFileOK(f file, size int64) bool {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return false
	}
	return indexChecksumOK(b)
}
