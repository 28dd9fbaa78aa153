package diskqueue

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// segmentFiles are a segment's open files before it joins the log: the
// three being appended to, the read handles, and each cursor's bitmap
// (in the order of l.cursors when they were made).
type segmentFiles struct {
	names [3]string
	appendFiles
	readLog, readIndex file
	acks               []*ackFile
}

// makeSegmentFiles creates a segment's files under names (and a bitmap for
// each of cursors, under ackName(cursor)), readied for appends with at least prealloc
// bytes of the log preallocated (on the mapped path), and opens its read
// handles. With headers set the files get their headers for base at once
// (so a reader in another process meets zeros there only briefly);
// otherwise (a spare) writeHeaders writes them when the base is known.
func (l *Log) makeSegmentFiles(names [3]string, cursors []*Cursor, ackName func(*Cursor) string, base uint64, mapped bool, prealloc int64, headers bool) (*segmentFiles, error) {
	sf := &segmentFiles{names: names}
	fail := func(err error) (*segmentFiles, error) {
		sf.discard(l)
		return nil, err
	}
	for i, name := range names {
		f, err := l.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, l.opts.FileMode)
		if err != nil {
			return fail(err)
		}
		sf.regions()[i].f = f
	}
	if err := l.readyAppendFiles(&sf.appendFiles, mapped, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("map %s: %w", names[0], err))
	}
	for _, r := range []*region{&sf.index, &sf.timeIdx} {
		if err := r.ensure(fileHeaderSize); err != nil {
			return fail(err)
		}
	}
	if err := sf.log.ensure(max(prealloc, fileHeaderSize)); err != nil {
		return fail(err)
	}
	if headers {
		if err := sf.writeHeaders(base); err != nil {
			return fail(err)
		}
	}
	for _, c := range cursors {
		a, err := c.createAckFileAt(ackName(c), base, l.recordCapacity(), mapped, true)
		if err != nil {
			return fail(err)
		}
		sf.acks = append(sf.acks, a)
	}
	var err error
	if sf.readLog, err = l.fs.OpenFile(names[0], os.O_RDONLY, 0); err != nil {
		return fail(err)
	}
	if sf.readIndex, err = l.fs.OpenFile(names[1], os.O_RDONLY, 0); err != nil {
		return fail(err)
	}
	return sf, nil
}

// writeHeaders writes the three file headers and the bitmaps' for base.
func (sf *segmentFiles) writeHeaders(base uint64) error {
	magics := [3][4]byte{magicLog, magicIndex, magicTimeIndex}
	for i, r := range sf.regions() {
		if err := r.write(0, appendFileHeader(nil, magics[i], base)); err != nil {
			return err
		}
	}
	for _, a := range sf.acks {
		if err := a.writeAt(encodeAckHeader(base, 0, 0), 0); err != nil {
			return err
		}
	}
	return nil
}

// discard closes and removes everything sf made.
func (sf *segmentFiles) discard(l *Log) {
	sf.close()
	for i, r := range sf.regions() {
		if r.f != nil {
			l.fs.Remove(sf.names[i])
		}
	}
	for _, f := range []file{sf.readLog, sf.readIndex} {
		if f != nil {
			f.Close()
		}
	}
	for _, a := range sf.acks {
		a.close()
		l.fs.Remove(a.name)
	}
}

// install makes the segment and its tail from files whose headers say
// base.
func (sf *segmentFiles) install(l *Log, base uint64, maxTime int64) (*segment, *tail) {
	seg := &segment{dir: l.dir, base: base}
	t := &tail{seg: seg, end: base, lastTimeSeq: maxSeq, maxTime: maxTime,
		appendFiles: sf.appendFiles,
		size:        fileHeaderSize, indexSize: fileHeaderSize, timeSize: fileHeaderSize,
		acks: sf.acks, ackCap: l.recordCapacity()}
	seg.setFiles(sf.readLog, sf.readIndex)
	seg.bitmaps.Store(int32(len(t.acks)))
	seg.writing.Store(true)
	seg.setExtent(fileHeaderSize, base)
	seg.indexBytes.Store(fileHeaderSize)
	seg.timeIndexBytes.Store(fileHeaderSize)
	seg.maxTime.Store(maxTime)
	return seg, t
}

// spareName is the name of a spare segment's file with the given suffix.
const spareName = "next"

// spare is a segment's files made ahead of need by the writer goroutine
// (prepareSpare) under spare names, preallocated and pre-faulted, so a
// rotation renames them into place rather than creating, allocating and
// mapping files while producers wait. Only the mapped path has one.
type spare struct {
	files   *segmentFiles
	cursors []*Cursor // the cursors its bitmaps are for
}

// takeSpareLocked turns the spare into the segment starting at base, or
// returns nil if there is none it can use (made for another set of
// cursors, or a rename failed: the rotation then creates the files). The
// headers are written before the renames and the log is renamed last, so
// a crash leaves either spare files (removed at Open) or a segment whose
// files that exist are whole: missing indexes are rebuilt, a missing
// bitmap is created. The caller holds l.mu.
func (l *Log) takeSpareLocked(base uint64, maxTime int64) (*segment, *tail) {
	sp := l.spare
	l.spare = nil
	if sp == nil {
		return nil, nil
	}
	if !slices.Equal(sp.cursors, l.cursors) {
		sp.files.discard(l)
		return nil, nil
	}
	sf := sp.files
	if err := sf.writeHeaders(base); err != nil {
		sf.discard(l)
		return nil, nil
	}
	seg := &segment{dir: l.dir, base: base}
	for i, a := range sf.acks {
		name := sp.cursors[i].ackPath(seg)
		if err := l.fs.Rename(a.name, name); err != nil {
			l.logger.Warn("diskqueue: cannot use the spare segment; creating one", "err", err)
			sf.discard(l)
			return nil, nil
		}
		a.name = name
		sp.cursors[i].newFiles.Store(true)
	}
	for i := 2; i >= 0; i-- { // the log last
		name := seg.path([]string{logSuffix, indexSuffix, timeIndexSuffix}[i])
		if err := l.fs.Rename(sf.names[i], name); err != nil {
			l.logger.Warn("diskqueue: cannot use the spare segment; creating one", "err", err)
			sf.discard(l)
			for j := i + 1; j <= 2; j++ {
				l.fs.Remove(seg.path([]string{logSuffix, indexSuffix, timeIndexSuffix}[j]))
			}
			return nil, nil
		}
		sf.names[i] = name
		if i == 1 {
			l.crashPoint("spare-rename") // indexes in place, the log not yet
		}
	}
	l.sparesUsed.Add(1)
	return sf.install(l, base, maxTime)
}

// prepareSpare makes the spare segment when the active one is half full
// and there is none, outside l.mu. A failure (a full disk) only means the
// next rotation creates its files itself. Only the writer goroutine calls
// it.
func (l *Log) prepareSpare() {
	l.mu.Lock()
	t := l.t
	need := t != nil && t.mapped && l.spare == nil && !l.closed && t.size >= l.opts.MaxSegmentBytes/2
	cursors := slices.Clone(l.cursors)
	l.mu.Unlock()
	if !need {
		return
	}
	names := [3]string{filepath.Join(l.dir, spareName+logSuffix), filepath.Join(l.dir, spareName+indexSuffix), filepath.Join(l.dir, spareName+timeIndexSuffix)}
	// Made for the cursors of the snapshot: one added meanwhile (under
	// l.mu) makes the spare unusable, which the check below and
	// takeSpareLocked see; deleting one runs on this goroutine.
	sf, err := l.makeSegmentFiles(names, cursors, func(c *Cursor) string { return filepath.Join(c.dir, spareName+ackSuffix) },
		0, true, min(logChunk, l.opts.MaxSegmentBytes), false)
	if err != nil {
		return
	}
	prefault(sf.log.m[:sf.log.alloc])
	sf.log.prefaulted = sf.log.alloc
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spare != nil || l.closed || !slices.Equal(cursors, l.cursors) {
		sf.discard(l)
		return
	}
	l.spare = &spare{files: sf, cursors: cursors}
}

// dropSpare removes the spare segment, if any (at Close). The caller holds
// l.mu.
func (l *Log) dropSpareLocked() {
	if l.spare != nil {
		l.spare.files.discard(l)
		l.spare = nil
	}
}
