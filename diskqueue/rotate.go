package diskqueue

import "fmt"

// rotateLocked hands the active segment to the writer goroutine to seal
// and starts the next one at the active one's end. The caller holds l.mu.
func (l *Log) rotateLocked() error {
	old := l.t
	seg, t := l.takeSpareLocked(old.end, old.maxTime)
	if seg == nil {
		var err error
		if seg, t, err = l.createSegment(old.end, old.maxTime, old.mapped); err != nil {
			if isNoSpace(err) {
				return fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
			return err
		}
	}
	l.crashPoint("rotate-created")
	l.flushLocked(old)
	old.seg.sealed.Store(true) // its size and end are final
	l.sealQ = append(l.sealQ, old)
	l.t = t
	l.dirDirty = true
	l.segMu.Lock()
	l.segs = append(l.segs, seg)
	l.nextSeq.last.Store(seg) // its end, its base, is old's
	l.diskBytes.Add(seg.diskBytes())
	l.segMu.Unlock()
	l.adoptBitmaps(t)
	l.wake()
	return nil
}

// adoptBitmaps hands each cursor its acknowledgement file of a new active
// segment. The caller holds l.mu.
func (l *Log) adoptBitmaps(t *tail) {
	for _, a := range t.acks {
		c := a.owner
		c.readMu.Lock()
		c.installLocked(c.state(t.seg), a)
		c.readMu.Unlock()
	}
}

// createSegment creates the three files of a segment starting at base with
// their headers (and each cursor's acknowledgement file), and returns the
// segment (with its read handles) and its tail. It syncs nothing: the
// writer goroutine fsyncs the files and the directory before any record in
// them is reported durable.
func (l *Log) createSegment(base uint64, maxTime int64, mapped bool) (*segment, *tail, error) {
	seg := &segment{dir: l.dir, base: base}
	f, err := l.makeSegmentFiles([3]string{seg.path(logSuffix), seg.path(indexSuffix), seg.path(timeIndexSuffix)},
		l.cursors, func(c *Cursor) string { return c.ackPath(seg) }, base, mapped, fileHeaderSize, true)
	if err != nil {
		return nil, nil, fmt.Errorf("diskqueue: create segment %d: %w", base, err)
	}
	seg, t := f.install(l, base, maxTime)
	return seg, t, nil
}

// seal finishes a segment nothing will append to any more: it closes the
// time index with the segment's last record (so SeekTime knows each sealed
// segment's newest timestamp without reading its log), unmaps the files,
// cuts each to what was written and fsyncs them (unless NoSync). Open then
// treats the segment as complete and never reads it at start-up.
func (l *Log) seal(t *tail) error {
	l.prepMu.Lock() // the preparer may be pre-faulting t's log
	t.unmap()
	l.prepMu.Unlock()
	err := l.sealFiles(t)
	t.close()
	// Appends do not publish the newest timestamp (segMaxTime); from here
	// on it is final.
	t.seg.maxTime.Store(t.maxTime)
	t.seg.writing.Store(false)
	l.openSegs.add(t.seg) // its read handles are open: the cache bounds them from now on
	return err
}

func (l *Log) sealFiles(t *tail) error {
	if t.end > t.seg.base && t.lastTimeSeq != t.end-1 {
		e := appendTimeEntry(nil, t.maxTime, t.end-1)
		if _, err := t.timeIdx.f.WriteAt(e, t.timeSize); err != nil {
			return fmt.Errorf("diskqueue: seal %s: %w", t.seg.path(timeIndexSuffix), err)
		}
		t.timeSize += timeIndexEntrySize
		t.lastTimeSeq = t.end - 1
		prev := t.seg.diskBytes()
		t.seg.timeIndexBytes.Store(t.timeSize)
		l.diskBytes.Add(t.seg.diskBytes() - prev)
	}
	for _, a := range t.acks {
		// Acks touch only the bits of records that exist, all inside.
		if err := a.f.Truncate(ackFileSize(t.end - t.seg.base)); err != nil {
			return fmt.Errorf("diskqueue: seal %s: %w", a.name, err)
		}
	}
	// The log is cut last: a read-only view (Verify beside a live writer)
	// tells an unsealed segment by its log's preallocated size, so once
	// the log is exact, the other files must be too.
	for _, c := range []struct {
		r    *region
		size int64
		name string
	}{{&t.timeIdx, t.timeSize, timeIndexSuffix}, {&t.index, t.indexSize, indexSuffix}, {&t.log, t.size, logSuffix}} {
		if err := c.r.f.Truncate(c.size); err != nil {
			return fmt.Errorf("diskqueue: seal %s: %w", t.seg.path(c.name), err)
		}
	}
	if !l.opts.NoSync {
		for _, c := range []struct {
			r    *region
			name string
		}{{&t.log, logSuffix}, {&t.index, indexSuffix}, {&t.timeIdx, timeIndexSuffix}} {
			if err := c.r.f.Sync(); err != nil {
				// Sticky even for ENOSPC: after a failed fsync the kernel
				// may have dropped the pages, so writing again proves nothing.
				return fmt.Errorf("diskqueue: seal: fsync %s: %w", t.seg.path(c.name), err)
			}
		}
	}
	l.crashPoint("rotate-sealed")
	return nil
}
