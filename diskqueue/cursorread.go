package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Read returns the cursor's next record in order, waiting for one if there
// is none until ctx ends or the log closes. The record is in flight until
// [Cursor.Ack] acknowledges it; records never acknowledged are delivered
// again after the log is reopened, so delivery is at-least-once.
//
// With a ctx that is already done, Read does not wait: it returns a record
// that is ready, or ctx.Err().
//
// Records whose bytes fail their checks are never returned: Read skips
// them, copies their bytes to a .bad file, logs a warning and counts them in
// [Stats].CorruptRecords. Records [Log.Compact] removed are passed over
// too, and counted acknowledged for this cursor (not in Acks). An I/O error is returned as is and the same
// record is tried again by the next Read. After [Log.DeleteCursor] Read
// returns [ErrClosed].
func (c *Cursor) Read(ctx context.Context) (rec Record, err error) {
	for {
		if c.backN.Load() > 0 {
			var one [1]Record
			if c.readBack(one[:]) > 0 {
				return one[0], nil
			}
		}
		seq, ts, body, err := c.tryRead()
		if err == nil {
			// Field by field: a Record built whole is built aside and
			// copied over in wider loads than its stores.
			rec.Seq, rec.Time, rec.Body = seq, time.Unix(0, ts), body
			return rec, nil
		}
		if err != errNoData {
			return Record{}, err
		}
		wait := c.log.written.Wait()
		// Look again now that we are registered for the next write (or
		// Unread), so one between the two is not missed.
		if c.backN.Load() > 0 {
			continue
		}
		if seq, ts, body, err = c.tryRead(); err == nil {
			rec.Seq, rec.Time, rec.Body = seq, time.Unix(0, ts), body
			return rec, nil
		} else if err != errNoData {
			return Record{}, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		case <-c.log.closeCh:
			return Record{}, ErrClosed
		}
	}
}

// makeRead is the Record of a read's fields. The layers of a Read pass
// the fields apart, in registers, and only Read and ReadBatch put them
// together: a Record is too large for the compiler to keep out of memory,
// so passed back up through the layers it was copied at each, a load of
// what had just been stored in other widths, and written through a
// pointer instead each of its pointers took a write barrier while the
// collector ran (a drain's allocations keep it running often).
func makeRead(seq uint64, ts int64, body []byte) Record {
	return Record{Seq: seq, Time: time.Unix(0, ts), Body: body}
}

// tryRead returns the next record's fields (makeRead), or errNoData.
func (c *Cursor) tryRead() (seq uint64, ts int64, body []byte, err error) {
	c.prepareAhead()
	c.readMu.Lock()
	defer c.readMu.Unlock()
	seq, ts, body, err = c.readLocked()
	if err == nil {
		c.handed.addOwned(1)
	}
	return seq, ts, body, err
}

// prepareAhead opens what the reader needs for the segment it is about to
// enter, before readMu (prepare).
func (c *Cursor) prepareAhead() {
	if seg := c.ahead.Load(); seg != nil && c.ahead.CompareAndSwap(seg, nil) {
		c.prepare(seg)
	}
}

// ReadBatch is [Cursor.Read] of up to len(dst) records at once, into dst:
// it waits for the first as Read does, takes those ready after it without
// waiting, and returns how many it stored. Each is in flight until
// [Cursor.Ack], as from Read. It takes the cursor's lock once for them
// all, so a consumer that works through records in batches, or hands them
// on to others who Ack them meanwhile, does not contend for it once per
// record. An error met after the first record ends the batch early, and
// the next call meets it again. It returns 0 and no error only for an
// empty dst.
func (c *Cursor) ReadBatch(ctx context.Context, dst []Record) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for {
		if c.backN.Load() > 0 {
			if n := c.readBack(dst); n > 0 {
				return n, nil
			}
		}
		n, err := c.tryReadBatch(dst)
		if err != errNoData {
			return n, err
		}
		wait := c.log.written.Wait()
		// Look again now that we are registered for the next write, as
		// Read does.
		if c.backN.Load() > 0 {
			continue
		}
		if n, err = c.tryReadBatch(dst); err != errNoData {
			return n, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.log.closeCh:
			return 0, ErrClosed
		}
	}
}

// tryReadBatch fills dst with the records ready, at least one, or returns
// errNoData.
func (c *Cursor) tryReadBatch(dst []Record) (int, error) {
	c.prepareAhead()
	c.readMu.Lock()
	defer c.readMu.Unlock()
	n := 0
	for n < len(dst) {
		seq, ts, body, err := c.readLocked()
		if err != nil {
			if n == 0 {
				return 0, err
			}
			break
		}
		dst[n] = makeRead(seq, ts, body)
		n++
		if c.ahead.Load() != nil {
			break // the next segment's files are opened outside readMu, by the next call
		}
	}
	c.handed.addOwned(int64(n))
	return n, nil
}

// readLocked returns the next record's fields (makeRead) or errNoData,
// and the caller adds it to handed. The caller holds c.readMu.
func (c *Cursor) readLocked() (uint64, int64, []byte, error) {
	for {
		if c.closed || c.log.isClosed.Load() {
			return 0, 0, nil, ErrClosed
		}
		seq, ts, body, err := c.rd.nextRaw()
		if len(c.rd.removed) > 0 {
			c.passRemovedLocked(c.rd.removed)
		}
		if err == nil {
			seg := c.rd.seg
			c.log.crashPoint("read-taken")
			a, err := c.readAckFor(seg)
			if errors.Is(err, ErrNotFound) {
				// seg left the log (or a tombstone stands for it) after
				// nextRaw took the record from it: every cursor had
				// acknowledged all of it, or given it up, so the record
				// is passed over, and nextRaw, finding seg gone, moves
				// on. Given back instead, it came again at every Read,
				// each failing, until the next Open.
				continue
			}
			if err != nil {
				c.rd.unread(seq)
				c.log.readErrors.Add(1)
				return 0, 0, nil, err
			}
			if seq <= c.ackedMax {
				// Acknowledged before a restart, out of order.
				set, err := a.isSet(seq - seg.base)
				if err != nil {
					c.rd.unread(seq)
					return 0, 0, nil, err
				}
				if set {
					continue
				}
			}
			// Record that this far may be handed out before it is, so a
			// crash cannot leave an acknowledgement Open would not count.
			if err := a.raiseReadEnd(seq+1, seg.base); err != nil {
				c.rd.unread(seq)
				return 0, 0, nil, err
			}
			return seq, ts, body, nil
		}
		if err == errNoData {
			return 0, 0, nil, err
		}
		// next returns damage unwrapped; a type switch, unlike errors.As,
		// costs no allocation on this hot path.
		if d, ok := err.(*damageError); ok {
			c.quarantine(d)
			continue
		}
		c.log.readErrors.Add(1)
		return 0, 0, nil, err
	}
}

// readAckFor is ackFor for the segment a record was just read from, with
// its state cached between Reads as Ack caches its own (lastAcked): a
// drain reads thousands of records of a segment in a row. The caller
// holds c.readMu.
func (c *Cursor) readAckFor(seg *segment) (*ackFile, error) {
	if sa := c.lastRead; sa != nil && sa.seg == seg && sa.ack != nil {
		return sa.ack, nil
	}
	a, err := c.ackFor(seg)
	if err == nil {
		c.lastRead = c.segs[seg]
		// The reader has entered seg: have the next Read open the files
		// of the segment after it, if they are not, outside readMu.
		if nxt := c.log.segmentAfter(seg); nxt != nil {
			if sa := c.segs[nxt]; nxt.files.Load() == nil || sa == nil || sa.ack == nil {
				c.ahead.Store(nxt)
			}
		}
	}
	return a, err
}

// prepare opens what the reader needs to enter seg, without the cursor's
// readMu, so that no consumer of the cursor (nor Ack) waits behind the
// I/O: seg's read handles, whose first open reads and checks headers and
// may rebuild an index, with their mappings, and the cursor's existing
// bitmap of it, which is installed under readMu unless one was meanwhile
// or seg is leaving the log. What is missing or damaged is left to ackFor,
// under readMu (a bitmap is created only there, so two creations never
// race). Failures are ignored: the reader meets them again and reports
// them.
func (c *Cursor) prepare(seg *segment) {
	l := c.log
	if seg.gone.Load() {
		return
	}
	if f, err := l.acquireFiles(seg); err == nil {
		f.maps(l, seg)
		f.release()
	}
	c.readMu.Lock()
	sa := c.segs[seg]
	have := c.closed || sa != nil && sa.ack != nil
	c.readMu.Unlock()
	if have {
		return
	}
	capacity := c.ackCapacity(seg)
	a, flags, err := c.openAckFile(seg, capacity)
	if err != nil {
		return
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	sa = c.segs[seg]
	if flags&ackGone != 0 || c.closed || sa != nil && sa.ack != nil ||
		seg.gone.Load() || l.segmentAt(seg.base) != seg || seg.endNow() <= c.ackFloor.Load() {
		// A tombstone, a bitmap opened meanwhile, or a segment the floor
		// has passed (nothing would retire the file) or that is leaving.
		a.close()
		return
	}
	c.installLocked(c.state(seg), a)
}

// quarantine copies damaged bytes aside, reports them and treats their
// records as acknowledged, so the read cursor can pass them. The caller
// holds c.readMu. Each cursor that meets the damage does this; the bytes
// are copied aside once.
func (c *Cursor) quarantine(d *damageError) {
	lost := int64(d.next - d.first)
	c.log.corruptRecords.Add(lost)
	attrs := []any{"segment", d.seg.base, "offset", d.from, "first_seq", d.first, "records", lost, "err", d.cause}
	if d.to > d.from {
		name := fmt.Sprintf("%s.%d%s", d.seg.path(logSuffix), d.from, badSuffix)
		if err := c.log.copyBad(d.seg, d.from, d.to, name); err != nil {
			attrs = append(attrs, "bad_file_err", err)
		} else {
			attrs = append(attrs, "bad_file", name)
		}
	}
	c.logger.Warn("diskqueue: skipped damaged records", attrs...)
	c.ackPassedLocked(d.first, d.next, "diskqueue: cannot acknowledge damaged records; they are skipped again after a restart")
}

// ackPassedLocked counts as acknowledged, for this cursor, the records
// [from, to) its reader passed without handing them out: damaged ones, or
// ones compaction removed. What it cannot acknowledge it logs once, with
// why. Those it acknowledged that were not already it counts in Passed.
// The caller holds c.readMu.
func (c *Cursor) ackPassedLocked(from, to uint64, why string) {
	var seg *segment
	var failed, n int
	var firstErr error
	var firstSeq uint64
	for s := max(from, c.ackFloor.Load()); s < to; s++ {
		if seg == nil || s < seg.base || s >= seg.endNow() {
			seg = c.log.segmentAt(s)
		}
		if seg == nil || seg.gone.Load() {
			continue // deleted: every record in it acknowledged
		}
		a, err := c.ackFor(seg)
		if err == nil {
			// Open counts bits only below readEnd.
			err = a.raiseReadEnd(s+1, seg.base)
		}
		var was bool
		if err == nil {
			was, err = c.markAckedLocked(c.state(seg), s)
		}
		if err != nil {
			if failed == 0 {
				firstErr, firstSeq = err, s
			}
			failed++
		} else if !was {
			n++
		}
	}
	c.skipped.Add(int64(n))
	if failed > 0 {
		c.logger.Warn(why, "first_seq", firstSeq, "records", failed, "err", firstErr)
	}
}

// passRemovedLocked counts as acknowledged the records of gaps that
// compaction removed and the reader has just passed: whoever compacted
// them no longer needs them delivered, and a segment is deleted once every
// cursor has acknowledged all of it. Their bits are set as Ack sets them
// (readEnd raised first, as for damaged records), so Open counts them too;
// they are not counted in Acks, and were never in flight. The caller holds
// c.readMu.
func (c *Cursor) passRemovedLocked(gaps []seqRange) {
	for _, g := range gaps {
		c.ackPassedLocked(g.from, g.to, "diskqueue: cannot acknowledge records compaction removed; they stay in the cursor's depth until a restart passes them")
	}
}

// Passed returns how many records the cursor's reader has passed over
// since Open without handing them out, each counted as acknowledged then
// (not in Acks): damaged records it skipped, and records [Log.Compact]
// removed before it read them that were not acknowledged yet. Each was in
// [Cursor.Depth] until passed. A consumer that counts the records it
// expects to read (a channel's backlog) takes these off.
func (c *Cursor) Passed() int64 { return c.skipped.Load() }
