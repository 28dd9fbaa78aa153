// Package memlog is an in-memory log with cursors: the contract of
// [diskqueue.Log] and [diskqueue.Cursor] (channel.Log and channel.Cursor)
// without the disk, for tests of what runs over them. Records stay until
// every cursor has acknowledged them; [Log.Reopen] makes what a restart
// or a crash would find (nothing of a memlog is lost in one).
package memlog

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/broadcast"
)

// Log is an in-memory log. It is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	records []diskqueue.Record
	cursors map[string]*Cursor
	// minRecord and maxRecord bound the records Put takes (SetLimits).
	minRecord, maxRecord int
	closed               bool
	// wake is notified by every Put (and Unread, and Close), for readers
	// waiting; they take its channel under mu, before they let go of it.
	wake broadcast.Broadcast
}

// NewLog returns an empty log with no cursor and no record limits.
func NewLog() *Log {
	return &Log{cursors: map[string]*Cursor{}, maxRecord: diskqueue.MaxRecordBytesLimit}
}

// SetLimits makes Put refuse records shorter than min or longer than max
// bytes, as a disk log's MinRecordBytes and MaxRecordBytes do.
func (l *Log) SetLimits(min, max int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.minRecord, l.maxRecord = min, max
}

// Cursor returns the named cursor, made at the oldest record if the log
// has none of that name.
func (l *Log) Cursor(name string) *Cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cursors[name]
	if c == nil {
		c = &Cursor{log: l, acked: map[uint64]bool{}}
		l.cursors[name] = c
	}
	return c
}

// Close closes the log: every call after returns [diskqueue.ErrClosed], and
// reads waiting return it.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return diskqueue.ErrClosed
	}
	l.closed = true
	l.notifyLocked()
	return nil
}

// Reopen is what a restart finds: a new open log with the records and the
// acknowledgements of l, each cursor reading again from its floor (what it
// handed out and was not acknowledged comes again). l is left as it is
// (close it first for a graceful restart).
func (l *Log) Reopen() *Log {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := &Log{records: slices.Clone(l.records), cursors: map[string]*Cursor{}, minRecord: l.minRecord, maxRecord: l.maxRecord}
	for name, c := range l.cursors {
		n.cursors[name] = &Cursor{log: n, acked: maps.Clone(c.acked), floor: c.floor, next: c.floor}
	}
	return n
}

func (l *Log) notifyLocked() { l.wake.Notify() }

// Put appends body; see [diskqueue.Log.Put].
func (l *Log) Put(ctx context.Context, body []byte) error {
	_, err := l.PutSeq(ctx, body)
	return err
}

// PutSeq appends body and returns its seq.
func (l *Log) PutSeq(_ context.Context, body []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked(body); err != nil {
		return 0, err
	}
	return l.appendLocked(body), nil
}

// PutBatch appends bodies, all or none, and returns how many.
func (l *Log) PutBatch(_ context.Context, bodies [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range bodies {
		if err := l.checkLocked(b); err != nil {
			return 0, err
		}
	}
	for _, b := range bodies {
		l.appendLocked(b)
	}
	return len(bodies), nil
}

func (l *Log) checkLocked(body []byte) error {
	switch {
	case l.closed:
		return diskqueue.ErrClosed
	case len(body) > l.maxRecord:
		return fmt.Errorf("%w: %d bytes, limit %d", diskqueue.ErrRecordTooLarge, len(body), l.maxRecord)
	case len(body) < l.minRecord:
		return fmt.Errorf("%w: %d bytes, minimum %d", diskqueue.ErrRecordTooSmall, len(body), l.minRecord)
	}
	return nil
}

func (l *Log) appendLocked(body []byte) uint64 {
	seq := uint64(len(l.records))
	l.records = append(l.records, diskqueue.Record{Seq: seq, Time: time.Now(), Body: slices.Clone(body)})
	l.notifyLocked()
	return seq
}

// NextSeq is the seq the next record appended gets.
func (l *Log) NextSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.records))
}

// Floor is the lowest of the cursors' floors; NextSeq with no cursor.
func (l *Log) Floor() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	floor := uint64(len(l.records))
	for _, c := range l.cursors {
		floor = min(floor, c.floor)
	}
	return floor
}

// Acknowledged reports whether every cursor has acknowledged seq.
func (l *Log) Acknowledged(seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acknowledgedLocked(seq)
}

func (l *Log) acknowledgedLocked(seq uint64) bool {
	if seq >= uint64(len(l.records)) {
		return false
	}
	for _, c := range l.cursors {
		if !c.ackedLocked(seq) {
			return false
		}
	}
	return true
}

// ReadAt returns record seq while some cursor has not acknowledged it
// (a memlog retains nothing more), else [diskqueue.ErrNotFound].
func (l *Log) ReadAt(seq uint64) (diskqueue.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return diskqueue.Record{}, diskqueue.ErrClosed
	}
	if seq >= uint64(len(l.records)) || l.acknowledgedLocked(seq) {
		return diskqueue.Record{}, fmt.Errorf("%w: memlog: no record %d", diskqueue.ErrNotFound, seq)
	}
	return l.records[seq], nil
}

// Scan yields the records ReadAt would return, with from <= seq < to, a
// record at a time as it goes (Puts and Acks may land in the middle).
func (l *Log) Scan(from, to uint64) iter.Seq2[diskqueue.Record, error] {
	return l.scan(from, to, l.acknowledgedLocked)
}

// scan yields the records with from <= seq < to that skip does not leave
// out, taking the lock for each. It lets other goroutines run between
// records, so that what runs beside a scan lands in its middle, as it may
// on disk.
func (l *Log) scan(from, to uint64, skip func(seq uint64) bool) iter.Seq2[diskqueue.Record, error] {
	return func(yield func(diskqueue.Record, error) bool) {
		for seq := from; seq < to; seq++ {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				yield(diskqueue.Record{}, diskqueue.ErrClosed)
				return
			}
			if seq >= uint64(len(l.records)) {
				l.mu.Unlock()
				return
			}
			rec, skipped := l.records[seq], skip(seq)
			l.mu.Unlock()
			if skipped {
				continue
			}
			runtime.Gosched()
			if !yield(rec, nil) {
				return
			}
		}
	}
}

// Sync does nothing: every record is as durable as a memlog gets.
func (l *Log) Sync(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return diskqueue.ErrClosed
	}
	return nil
}

// MaxRecordBytes and MinRecordBytes are the limits SetLimits set.
func (l *Log) MaxRecordBytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxRecord
}

func (l *Log) MinRecordBytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.minRecord
}
