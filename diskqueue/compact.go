package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/golang/snappy"
)

// Compaction: rewriting a sealed segment without the records its owner no
// longer needs (Kafka's log cleaner, in the embedded setting). Which
// records those are is the caller's business (a key's older versions, say);
// here a record is kept or not by a function of it.
//
// The compacted segment keeps its base, its seqs and its files' names.
// Its log (format version 2) holds the records kept, byte for byte, in
// order; its sequence index keeps one entry per seq, the removed records'
// marked (indexRemoved), so every lookup is still one index read and one
// log read; its time index is rebuilt over the records kept. The
// acknowledgement bitmaps, per seq, are not touched.
//
// The new files are written beside the old ones and swapped in so that a
// crash at any moment leaves one of the two whole:
//
//  1. write NNNN.log.compact, NNNN.index.compact and
//     NNNN.timeindex.compact and fsync each (crash points
//     compact-writing, before the fsyncs, and compact-written): a crash
//     leaves the old files, and Open removes the new ones;
//  2. write the marker NNNN.compact atomically (temporary file, fsync,
//     rename, directory fsync): the decision. The directory fsync makes
//     the new files' names durable with the marker's. From here Open
//     finishes the compaction (compact-marked);
//  3. rename each new file over the old one, the log first
//     (compact-renamed-log), and fsync the directory (compact-renamed);
//  4. swap the new generation of read handles in (compact-swapped);
//  5. remove the marker.
//
// Open finishes an interrupted compaction before it looks at the segments:
// with a marker, it renames whatever new files remain over the old ones
// (a new log of another size than the marker says is not this
// compaction's: it rolls back instead), then removes the marker; without
// one, it removes the new files. Steps 2 to 5 run on the writer
// goroutine, so they never race a seal or a deletion; step 1, the long
// one, runs on the caller's.

// compactSuffix ends the names of a compaction's files: NNNN.compact, the
// marker, and NNNN.log.compact (and .index.compact, .timeindex.compact),
// the new files.
const compactSuffix = ".compact"

// maxCompactedLogBytes bounds a compacted log: its index entries have 31
// bits for an offset (indexRemoved).
const maxCompactedLogBytes = math.MaxInt32

// compactBufferBytes is how much of the new log a compaction buffers
// between writes.
const compactBufferBytes = 1 << 20

// CompactStats is what one [Log.Compact] did.
type CompactStats struct {
	// Base and End are the segment's seqs: [Base, End).
	Base, End uint64
	// Kept is how many records the segment holds after the compaction,
	// Removed how many this one removed (records an earlier compaction
	// removed count in neither).
	Kept, Removed int64
	// LogBytesBefore and LogBytesAfter are the size of the segment's log
	// before and after. (Its sequence index keeps its size; its time index
	// changes by a few entries.)
	LogBytesBefore, LogBytesAfter int64
}

// Compact rewrites the sealed segment whose first seq is base, keeping
// only the records keep returns true for: in order, with their seqs,
// timestamps and bytes unchanged. keep is called once for each record the
// segment holds, in seq order, on the caller's goroutine; rec.Body is
// valid only during the call. keep may read the log, but must not call
// Compact or Close (each would wait for this compaction). A segment
// nothing is removed from is left as it is. Compactions of one log run one
// at a time; a second waits for the first.
//
// After Compact returns, [Log.ReadAt] of a removed seq returns
// [ErrCompacted], and every other lookup still costs one index read and
// one log read; [Log.Scan] and [Cursor.Unacknowledged] skip removed
// records; a cursor's Read passes over the removed records it had not read
// yet, counting them acknowledged for that cursor (they stay in its Depth
// until it does), while one it had already handed out may still be
// acknowledged. Seqs never change, and a removed one is never used again.
// Reads racing the compaction see the segment before or after it, never a
// mix and never an error they would not return otherwise.
//
// The new files are written beside the old ones, fsynced and swapped in
// so that a crash or power cut at any step leaves either the old segment
// or the new one, never neither: Open finishes or undoes an interrupted
// compaction (FORMAT.md). Until they are swapped in, the new files take
// disk space MaxDiskBytes does not count.
//
// It returns [ErrNotCompactable] for the active segment, for one rotated
// out but not yet sealed, and for one whose compacted log would be 2 GiB
// or more; [ErrNotFound] if no segment starts at base or it is deleted
// meanwhile; [ErrCorrupt] (and changes nothing) if a record in it fails
// its checks; ErrReadOnly, ErrClosed, or ctx's error. A failure leaves the
// segment as it was, readable as before.
func (l *Log) Compact(ctx context.Context, base uint64, keep func(rec Record) bool) (CompactStats, error) {
	if l.readOnly {
		return CompactStats{}, ErrReadOnly
	}
	if l.isClosed.Load() {
		return CompactStats{}, ErrClosed
	}
	select {
	case l.compactCh <- struct{}{}:
	case <-ctx.Done():
		return CompactStats{}, ctx.Err()
	case <-l.closeCh:
		return CompactStats{}, ErrClosed
	}
	defer func() { <-l.compactCh }()
	st, err := l.compact(ctx, base, keep)
	if err != nil && l.isClosed.Load() && !errors.Is(err, ErrClosed) {
		// Close released the files under it.
		err = fmt.Errorf("%w (%w)", ErrClosed, err)
	}
	return st, err
}

// compact is Compact once it is the log's one compaction.
func (l *Log) compact(ctx context.Context, base uint64, keep func(rec Record) bool) (CompactStats, error) {
	seg, err := l.segmentFor(base)
	if err == nil && (seg.base != base || seg.gone.Load()) {
		err = fmt.Errorf("%w: no segment starts at seq %d", ErrNotFound, base)
	}
	if err != nil {
		return CompactStats{}, fmt.Errorf("diskqueue: compact: %w", err)
	}
	if !seg.sealed.Load() {
		return CompactStats{}, fmt.Errorf("%w: segment %d is the active segment", ErrNotCompactable, base)
	}
	if seg.writing.Load() {
		return CompactStats{}, fmt.Errorf("%w: segment %d is being sealed", ErrNotCompactable, base)
	}
	old, err := l.acquireFiles(seg)
	if err != nil {
		return CompactStats{}, fmt.Errorf("diskqueue: compact: %w", err)
	}
	defer old.release()
	c, err := l.rewriteSegment(ctx, seg, old, keep)
	if err != nil || c.stats.Removed == 0 {
		return c.stats, err
	}
	l.crashPoint("compact-written")
	var decided, ran bool
	var commitErr error
	err = l.request(func() error {
		ran = true
		decided, commitErr = l.commitCompaction(c)
		return commitErr
	})
	if ran {
		// request may report the log closing after the commit ran.
		err = commitErr
	}
	if err != nil && !decided {
		l.discardCompaction(seg.base)
	}
	if err != nil {
		return CompactStats{}, err
	}
	return c.stats, nil
}

// compaction is a segment's new files, written and fsynced, waiting to be
// swapped in.
type compaction struct {
	seg     *segment
	old     *segFiles // the generation rewritten, held by Compact
	marker  compactMarker
	maxTime int64 // newest timestamp kept (within the segment)
	stats   CompactStats
}

// compactPaths are the new files' names: log, index, time index.
func (l *Log) compactPaths(base uint64) [3]string {
	var p [3]string
	for i, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		p[i] = filepath.Join(l.dir, segmentName(base, suffix)+compactSuffix)
	}
	return p
}

// compactMarkerPath is the marker's name.
func (l *Log) compactMarkerPath(base uint64) string {
	return filepath.Join(l.dir, segmentName(base, compactSuffix))
}

// rewriteSegment is step 1: it reads generation old of seg's files and
// writes the records keep keeps to the new files, fsynced. If keep removes nothing it writes nothing (stats.Removed is
// zero). On an error nothing it made is left.
func (l *Log) rewriteSegment(ctx context.Context, seg *segment, old *segFiles, keep func(Record) bool) (c *compaction, err error) {
	end, limit := seg.endNow(), seg.limit(old)
	c = &compaction{seg: seg, old: old, stats: CompactStats{Base: seg.base, End: end, LogBytesBefore: limit, LogBytesAfter: limit}}
	fail := func(err error) (*compaction, error) {
		return &compaction{stats: c.stats}, fmt.Errorf("diskqueue: compact segment %d: %w", seg.base, err)
	}
	paths := l.compactPaths(seg.base)
	var files [3]file
	done := false // the new files are complete (or a panic in keep left them)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		if !done || c.stats.Removed == 0 {
			for _, p := range paths {
				l.fs.Remove(p)
			}
		}
	}()
	for i, p := range paths {
		if files[i], err = l.fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, l.opts.FileMode); err != nil {
			return fail(err)
		}
	}

	// The scanner's strict policy (no resync): a segment with damage is
	// left as it is, for Verify to report, not rewritten without it.
	sc := newScanner(old.log, fileHeaderSize, seg.base, limit)
	sc.win.chunk = compactBufferBytes
	if old.compacted {
		sc.allowGaps(end)
	}
	b := indexBuilder{lastTimeSeq: maxSeq}
	out := appendFileHeaderVersion(make([]byte, 0, compactBufferBytes+fileHeaderSize), magicLog, formatVersionCompacted, seg.base)
	var written int64 // bytes of out already in the new log
	var scratch []byte
	flush := func() error {
		if _, err := files[0].WriteAt(out, written); err != nil {
			return err
		}
		written += int64(len(out))
		out = out[:0]
		if l.isClosed.Load() {
			return ErrClosed
		}
		return ctx.Err()
	}
	for next := sc.seq; sc.Next(); next = sc.seq {
		off, h, n := sc.Record()
		if h.seq >= end {
			return fail(fmt.Errorf("%w: record %d at offset %d is past the segment's end %d", ErrCorrupt, h.seq, off, end))
		}
		b.removed(h.seq - next) // by an earlier compaction
		frame, err := sc.win.bytesAt(off, n, limit)
		if err != nil {
			return fail(err)
		}
		rec := Record{Seq: h.seq, Time: time.Unix(0, h.ts), Body: frame[recordHeaderSize:]}
		if h.flags&flagSnappy != 0 {
			if scratch, err = snappy.Decode(scratch[:cap(scratch)], rec.Body); err != nil {
				return fail(fmt.Errorf("%w: seq %d: snappy: %v", ErrCorrupt, h.seq, err))
			}
			rec.Body = scratch
		}
		if !keep(rec) {
			b.removed(1)
			c.stats.Removed++
			continue
		}
		at := written + int64(len(out))
		if at+int64(n) > maxCompactedLogBytes {
			return fail(fmt.Errorf("%w: segment %d: the compacted log would pass 2 GiB", ErrNotCompactable, seg.base))
		}
		out = append(out, frame...)
		b.add(at, h)
		c.maxTime = max(c.maxTime, h.ts)
		c.stats.Kept++
		if len(out) >= compactBufferBytes {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		switch {
		case isDamage(err):
			err = fmt.Errorf("%w (segment left as it is; Verify reports the damage): %w", ErrCorrupt, err)
		case errors.Is(err, os.ErrClosed):
			// Deleted meanwhile (every record acknowledged, or Empty).
			err = fmt.Errorf("%w: segment %d was deleted while it was compacted", ErrNotFound, seg.base)
		}
		return fail(err)
	}
	if sc.seq < end && !old.compacted {
		return fail(fmt.Errorf("%w: the log holds seqs up to %d, the segment's end is %d", ErrCorrupt, sc.seq, end))
	}
	b.removed(end - sc.seq) // an earlier compaction removed the last ones
	if c.stats.Removed == 0 {
		done = true
		return c, nil // nothing to do: the deferred cleanup removes the files
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	b.finish(written, seg.base, end)
	if got, want := len(b.idx), int((end-seg.base)*indexEntrySize); got != want {
		panic(fmt.Sprintf("diskqueue: compaction built %d index bytes for %d records", got, end-seg.base))
	}
	l.crashPoint("compact-writing")
	index := encodeCompactedIndex(seg.base, b.idx)
	timeIndex := append(appendFileHeader(nil, magicTimeIndex, seg.base), b.tidx...)
	if _, err := files[1].WriteAt(index, 0); err != nil {
		return fail(err)
	}
	if _, err := files[2].WriteAt(timeIndex, 0); err != nil {
		return fail(err)
	}
	if !l.opts.NoSync {
		for i, f := range files {
			if err := f.Sync(); err != nil {
				return fail(fmt.Errorf("fsync %s: %w", paths[i], err))
			}
		}
	}
	for i := range files {
		err := files[i].Close()
		files[i] = nil
		if err != nil {
			return fail(err)
		}
	}
	// Their names become durable with the marker's: the directory fsync
	// that makes the marker durable makes every name in the directory so.
	c.marker = compactMarker{base: seg.base, end: end, logBytes: written, indexBytes: int64(len(index)), timeBytes: int64(len(timeIndex))}
	c.stats.LogBytesAfter = written
	done = true
	return c, nil
}
