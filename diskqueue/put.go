package diskqueue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/golang/snappy"
)

// Put appends a copy of body to the queue. Put does not keep body.
//
// When Put returns nil the record is in the operating system's page cache,
// so it survives a crash of this process under every sync policy. With
// SyncEvery 1 Put also waits until the record is on stable storage, and
// concurrent Puts share one fsync (group commit); otherwise the writer
// goroutine fsyncs by the SyncEvery/SyncInterval policy, and
// [Log.Sync] waits for everything put so far.
//
// Put blocks only while waiting for its fsync or (with BlockWhenFull) while
// the disk is full; ctx bounds the wait. If ctx ends while Put waits for an
// fsync the record is stored but may not be durable yet: the error wraps
// [ErrNotDurable]. Under SyncEvery 1 a ctx already ended stores nothing.
func (l *Log) Put(ctx context.Context, body []byte) error {
	_, err := l.PutSeq(ctx, body)
	return err
}

// PutSeq is [Log.Put] that also returns the record's seq, for callers that
// keep an index of their own (a channel's key policy). The seq is valid
// whenever the record was stored, which includes an error wrapping
// [ErrNotDurable]; otherwise it is 0.
func (l *Log) PutSeq(ctx context.Context, body []byte) (uint64, error) {
	seq, _, err := l.PutWithHead(ctx, nil, body, -1)
	return seq, err
}

// PutWithHead is [Log.PutSeq] of the record whose body is head followed
// by body, copied into the log from the two without being joined first:
// for a caller that wraps bodies in a header of its own. It does not keep
// head or body.
//
// If stampAt is not negative, the record stores, in the 8 bytes at
// stampAt (which must lie inside head), the time it is stamped with as
// Unix nanoseconds, big-endian, in place of what head holds there, and
// PutWithHead returns that time as ts: a caller that keeps a timestamp in
// its header has it without a clock read of its own. It is the record's
// timestamp (see [Record].Time), read from the log's clock, which lets one
// reading stamp the records put soon after it: a reading taken before the
// Put returned, at most about a millisecond older than the Put. With
// Options.Compress the header is stamped with a reading of its own before
// it is compressed. Otherwise (stampAt negative) ts is 0.
func (l *Log) PutWithHead(ctx context.Context, head, body []byte, stampAt int) (seq uint64, ts int64, err error) {
	if stampAt >= 0 && stampAt+8 > len(head) {
		return 0, 0, fmt.Errorf("%w: timestamp at %d of a %d-byte head", ErrInvalidOptions, stampAt, len(head))
	}
	if err := l.checkSize(len(head) + len(body)); err != nil {
		return 0, 0, err
	}
	if l.readOnly {
		return 0, 0, ErrReadOnly
	}
	var flags [1]byte
	stored := [1][]byte{body}
	if l.opts.Compress {
		// Compressed, the stamp cannot be patched in under the lock: the
		// record is joined, stamped now and compressed whole.
		joined := body
		if len(head) > 0 {
			joined = append(append(make([]byte, 0, len(head)+len(body)), head...), body...)
		}
		if stampAt >= 0 {
			ts = l.readClock()
			binary.BigEndian.PutUint64(joined[stampAt:], uint64(ts))
		}
		stored[0], flags[0] = compress(joined)
		head, stampAt = nil, -1
	}
	n, seq, stamp, err := l.putRecords(ctx, flags[:], head, stored[:], stampAt)
	if n == 0 {
		return 0, 0, err
	}
	if stampAt >= 0 {
		ts = stamp
	}
	return seq, ts, err
}

// PutBatch appends a copy of each of bodies, in order, as consecutive
// records: all under one acquisition of the log's lock unless the disk
// fills midway, so no other Put's record comes between them, and (with
// SyncEvery 1) with one wait for one fsync covering them all. It returns
// how many records it stored, always a prefix of bodies, and the first
// error. PutBatch does not keep bodies.
//
// Every body's size is checked before any is stored: one too large or too
// small ([ErrRecordTooLarge], [ErrRecordTooSmall]) stores nothing. When
// the disk fills midway the records stored stay, and PutBatch returns
// their count with [ErrDiskFull] (with BlockWhenFull it waits, as Put
// does, and goes on once there is room). When it returns, the records it
// counts are as durable as a Put's would be; if ctx ends while it waits
// for their fsync they are stored but may not be durable yet, and the
// error wraps [ErrNotDurable].
//
// The lock is held while the whole batch is copied in, so other producers
// wait that long: batches of a few hundred kilobytes keep that short.
func (l *Log) PutBatch(ctx context.Context, bodies [][]byte) (int, error) {
	for i, body := range bodies {
		if err := l.checkSize(len(body)); err != nil {
			return 0, fmt.Errorf("%w (body %d of %d)", err, i, len(bodies))
		}
	}
	if l.readOnly {
		return 0, ErrReadOnly
	}
	stored, flags := bodies, []byte(nil)
	if l.opts.Compress {
		stored, flags = make([][]byte, len(bodies)), make([]byte, len(bodies))
		for i, body := range bodies {
			stored[i], flags[i] = compress(body)
		}
	}
	n, _, _, err := l.putRecords(ctx, flags, nil, stored, -1)
	return n, err
}

// checkSize checks a record of n bytes against MaxRecordBytes and
// MinRecordBytes; small enough to be inlined into the Puts.
func (l *Log) checkSize(n int) error {
	if n > l.opts.MaxRecordBytes || n < l.opts.MinRecordBytes {
		return l.bodySizeError(n)
	}
	return nil
}

func (l *Log) bodySizeError(n int) error {
	if n > l.opts.MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, n, l.opts.MaxRecordBytes)
	}
	return fmt.Errorf("%w: %d bytes, minimum %d", ErrRecordTooSmall, n, l.opts.MinRecordBytes)
}

// compress returns what a record of body stores: body snappy-compressed,
// flagged, when that is smaller, or body itself.
func compress(body []byte) ([]byte, byte) {
	if c := snappy.Encode(nil, body); len(c) < len(body) {
		return c, flagSnappy
	}
	return body, 0
}

// putRecords is Put's and PutBatch's loop: it appends stored[i] (flagged
// flags[i]; flags may be nil for none) in order, as many as fit per
// acquisition of l.mu, waiting for space between acquisitions with
// BlockWhenFull, and then waits once, as the sync policy says, for the
// last of them. It returns how many it stored, the last one's seq and
// timestamp, and the first error. Each record is head (nil for none)
// followed by stored[i], stamped at stampAt of it unless that is negative
// (PutWithHead).
func (l *Log) putRecords(ctx context.Context, flags []byte, head []byte, stored [][]byte, stampAt int) (n int, last uint64, lastTS int64, err error) {
	if l.syncAlways && !l.opts.NoSync {
		// A ctx that has ended stores nothing: stored, the records would
		// come back with ErrNotDurable, their Put neither done nor undone.
		if err := ctx.Err(); err != nil {
			return 0, 0, 0, fmt.Errorf("diskqueue: put: %w", err)
		}
	}
	waited := false
	rolled := false // waited once for a roll of the consumed active segment
	for {
		l.mu.Lock()
		if err = l.acceptingLocked(); err != nil {
			l.mu.Unlock()
			break
		}
		from := n
		budget := false // the disk budget (not the file system) is spent
		for n < len(stored) {
			if err = l.fullLocked(int64(frameSize(len(head) + len(stored[n])))); err != nil {
				budget = true
				break
			}
			var f byte
			if flags != nil {
				f = flags[n]
			}
			var seq uint64
			var ts int64
			if seq, ts, err = l.appendLocked(f, head, stored[n], stampAt); err != nil {
				break
			}
			last, lastTS = seq, ts
			n++
		}
		// Woken once, as the count crosses the policy: the writer resets it
		// only when its round begins, and until then every Put would wake
		// it again (a send on a full channel, about 3 ns a Put behind a
		// slow fsync). The token stays until a round takes it.
		over := l.unsynced >= l.opts.SyncEvery && l.unsynced-(n-from) < l.opts.SyncEvery
		full := err != nil && errors.Is(err, ErrDiskFull)
		var wait <-chan struct{}
		drop, roll := false, false
		if full {
			roll = l.requestRollLocked(!budget)
			drop = budget && l.mayMakeRoomLocked()
			wait = l.freed.Wait()
		}
		l.mu.Unlock()
		if n > from {
			l.written.Notify()
			if over && (!l.syncAlways || l.opts.NoSync) {
				l.wake()
			}
		}
		if err == nil {
			if waited {
				l.retriedWrites.Add(1)
			}
			break
		}
		if !full {
			break
		}
		if drop && l.dropForRoom(ctx, int64(frameSize(len(head)+len(stored[n])))) {
			continue // there is room now, made by the drop-when-full policy or not (discard.go)
		}
		if !l.opts.BlockWhenFull {
			if !roll || rolled {
				break
			}
			// Every record is acknowledged: the writer's roll of the
			// active segment, asked for now, frees its space in a moment.
			// Failed at once, the Puts right after consumers had freed
			// everything failed too, until the writer came round.
			rolled = true
			if l.waitForSpace(ctx, wait) != nil {
				break
			}
			continue
		}
		if l.opts.fullHookForTesting != nil {
			l.opts.fullHookForTesting()
		}
		if werr := l.waitForSpace(ctx, wait); werr != nil {
			// Both: the caller may test for either.
			err = fmt.Errorf("%w; stopped waiting for space: %w", err, werr)
			break
		}
		waited = true
	}
	if n == 0 || !l.syncAlways || l.opts.NoSync {
		return n, last, lastTS, err
	}
	if serr := l.waitSynced(ctx, last+1, 0, false); serr != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(serr, cerr) {
			serr = fmt.Errorf("diskqueue: put: %w (%w)", ErrNotDurable, serr)
		} else {
			serr = fmt.Errorf("diskqueue: put: %w", serr)
		}
		if err == nil {
			return n, last, lastTS, serr
		}
		return n, last, lastTS, errors.Join(err, serr)
	}
	return n, last, lastTS, err
}

// acceptingLocked returns why the queue takes no more writes: closed, or a
// sticky write error.
func (l *Log) acceptingLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.writeErr
}
