package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"

	"github.com/spillq/spillq/internal/broadcast"
	"github.com/spillq/spillq/internal/histogram"
)

// Queue is a durable FIFO of records on disk. It is safe for concurrent use
// by any number of producers and consumers.
//
// Producers call [Queue.Put]; consumers call [Queue.Read] and then
// [Queue.Ack]. Any stored record can be looked up with [Queue.ReadAt], read
// in ranges with [Queue.Scan], or found by time with [Queue.SeekTime].
type Queue struct {
	dir  string
	opts Options
	fs   fileSystem
	log  *slog.Logger
	lock io.Closer

	// readOnly is set by OpenReadOnly: no lock, no writer, no repairs.
	readOnly bool
	// listing is the directory as Open read it; only during Open.
	listing map[string]os.DirEntry
	// started is when Open ran; record timestamps are it plus the
	// monotonic time since (see stamp).
	started time.Time
	// openSeq is nextSeq at Open: Puts since Open are the difference.
	openSeq uint64
	// lastMaxTime carries the running maximum of timestamps from one
	// segment to the next while Open recovers them.
	lastMaxTime int64

	// syncAlways is true when every Put waits for its record to be written
	// and (unless NoSync) fsynced: SyncEvery == 1.
	syncAlways bool

	// mu guards the fields below: the producer side. Producers append
	// under it (log.go).
	mu       sync.Mutex
	t        *tail   // the active segment; nil once Close has sealed it
	sealQ    []*tail // segments rotated out, for the writer to seal
	unsynced int     // records appended since the last fsync round began
	dirDirty bool    // segments were created since the last directory fsync
	closed   bool
	writeErr error // first failed write or fsync; sticky
	// mapped says appends copy into mapped, preallocated files; otherwise
	// each Put writes with write(2). Chosen at Open.
	mapped bool

	wakeCh   chan struct{}   // capacity 1: there is work for the writer
	emptyCh  chan chan error // Empty's requests to the writer
	closeCh  chan struct{}   // closed by Close: tells every wait to give up
	isClosed atomic.Bool     // set with closeCh, for checks on hot paths
	writerCh chan struct{}   // closed when the writer goroutine has returned

	// syncedSeq is the seq below which every record is on stable storage
	// (with NoSync: in the kernel); the writer goroutine raises it and
	// then notifies synced. syncWaiters counts the Puts and Syncs waiting.
	syncedSeq atomic.Uint64
	synced    broadcast.Broadcast
	// roundStarted and roundDone number the writer's rounds, so Sync can
	// wait for one that began after it was called.
	roundStarted, roundDone atomic.Uint64
	syncWaiters             atomic.Int64
	failErr                 atomic.Pointer[error] // writeErr, readable without mu

	written broadcast.Broadcast // new records are readable
	freed   broadcast.Broadcast // disk space was freed

	// segMu guards segs. Rotation (under mu) appends to it; the writer
	// goroutine removes from it.
	segMu sync.RWMutex
	segs  []*segment // sorted by base; the last one is being written

	// readMu guards the fields below: the consumer side.
	readMu sync.Mutex
	rd     reader // the next record Read hands out
	// ackedMax is the highest seq acknowledged (at Open: an upper bound of
	// those acknowledged before). Read checks the bitmap only for records
	// at or below it: in a steady run acks trail the reader and it costs
	// nothing.
	ackedMax uint64
	// lastAcked is the segment the last Ack landed in (cache for the next).
	lastAcked *segment

	// w is the writer goroutine's state.
	w writer

	// The cursors, written only under the lock named and readable without
	// one (Depth, Stats, the writer's housekeeping).
	nextSeq  atomic.Uint64 // seq the next Put gets; written under mu
	ackFloor atomic.Uint64 // oldest record not yet acknowledged; written under readMu
	// ackedAbove counts acknowledged records above ackFloor (acked out of
	// order, or before a restart ahead of the floor); written under readMu.
	ackedAbove atomic.Int64
	inFlight   atomic.Int64 // handed out by Read, not yet acknowledged; written under readMu

	// Gauges and counters for Stats, readable without a lock.
	diskBytes      atomic.Int64 // bytes written to every segment's three files
	deleteHint     atomic.Uint64
	rollRequested  atomic.Bool
	corruptRecords atomic.Int64
	badFiles       atomic.Int64
	indexRebuilds  atomic.Int64
	readErrors     atomic.Int64
	syncs          atomic.Int64
	acks           atomic.Int64
	retriedWrites  atomic.Int64
	syncLatency    histogram.Histogram // duration of each fsync of the log
}

// Record is one record read from the queue. Body belongs to the caller.
type Record struct {
	Seq  uint64    // position in the log; consecutive, starting where the queue started
	Time time.Time // when Put stored it: the wall clock at Open plus the monotonic time since
	Body []byte
}

// Open opens the queue in dir, creating the directory if needed, and
// recovers from whatever state a crash left it in (see FORMAT.md). Only one
// Queue may have a directory open at a time; a second Open returns
// [ErrLocked].
func Open(dir string, opts Options) (*Queue, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	q := newQueue(dir, o)
	if err := q.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	lock, err := q.fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("diskqueue: open %s: %w", dir, err)
	}
	q.lock = lock
	if err := q.recover(); err != nil {
		q.closeFiles()
		lock.Close()
		return nil, err
	}
	go q.run()
	return q, nil
}

// OpenReadOnly opens the queue in dir for inspection, such as by an
// operator's tool while a service has it open: it takes no lock, starts no
// writer, and changes no file. It sees the records written up to the
// moment it opens, up to the first bytes at the tail that do not check out
// (a write in progress, or a torn one that Open would cut). Put, Sync and
// Empty return [ErrReadOnly]; Read and Ack work on an in-memory cursor that
// is never stored.
func OpenReadOnly(dir string, opts Options) (*Queue, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	q := newQueue(dir, o)
	q.readOnly = true
	close(q.writerCh) // there is no writer to wait for
	if err := q.recover(); err != nil {
		q.closeFiles()
		return nil, err
	}
	return q, nil
}

func newQueue(dir string, o Options) *Queue {
	return &Queue{
		dir:        dir,
		opts:       o,
		started:    time.Now(),
		fs:         o.fsForTesting,
		log:        o.Logger.With("queue", dir),
		syncAlways: o.SyncEvery == 1,
		wakeCh:     make(chan struct{}, 1),
		emptyCh:    make(chan chan error),
		closeCh:    make(chan struct{}),
		writerCh:   make(chan struct{}),
	}
}

// Put appends a copy of body to the queue. Put does not keep body.
//
// When Put returns nil the record is in the operating system's page cache,
// so it survives a crash of this process under every sync policy. With
// SyncEvery 1 Put also waits until the record is on stable storage, and
// concurrent Puts share one fsync (group commit); otherwise the writer
// goroutine fsyncs by the SyncEvery/SyncInterval policy, and
// [Queue.Sync] waits for everything put so far.
//
// Put blocks only while waiting for its fsync or (with BlockWhenFull) while
// the disk is full; ctx bounds the wait. If ctx ends while Put waits for an
// fsync the record is stored but may not be durable yet.
func (q *Queue) Put(ctx context.Context, body []byte) error {
	if len(body) > q.opts.MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, len(body), q.opts.MaxRecordBytes)
	}
	if len(body) < q.opts.MinRecordBytes {
		return fmt.Errorf("%w: %d bytes, minimum %d", ErrRecordTooSmall, len(body), q.opts.MinRecordBytes)
	}
	if q.readOnly {
		return ErrReadOnly
	}
	var flags byte
	stored := body
	if q.opts.Compress {
		if c := snappy.Encode(nil, body); len(c) < len(body) {
			stored, flags = c, flagSnappy
		}
	}
	frame := int64(frameSize(len(stored)))
	for waited := false; ; waited = true {
		q.mu.Lock()
		if err := q.acceptingLocked(); err != nil {
			q.mu.Unlock()
			return err
		}
		err := q.fullLocked(frame)
		var seq uint64
		if err == nil {
			seq, err = q.appendLocked(flags, stored)
		}
		if err != nil {
			if errors.Is(err, ErrDiskFull) {
				q.requestRollLocked()
			}
			wait := q.freed.Wait()
			q.mu.Unlock()
			if !q.opts.BlockWhenFull || !errors.Is(err, ErrDiskFull) {
				return err
			}
			if err := q.waitForSpace(ctx, wait); err != nil {
				return err
			}
			continue
		}
		over := q.unsynced >= q.opts.SyncEvery
		q.mu.Unlock()
		if waited {
			q.retriedWrites.Add(1)
		}
		q.written.Notify()
		if !q.syncAlways || q.opts.NoSync {
			if over {
				q.wake()
			}
			return nil
		}
		if err := q.waitSynced(ctx, seq+1, 0, false); err != nil {
			return fmt.Errorf("diskqueue: put: %w", err)
		}
		return nil
	}
}

// acceptingLocked returns why the queue takes no more writes: closed, or a
// sticky write error.
func (q *Queue) acceptingLocked() error {
	if q.closed {
		return ErrClosed
	}
	return q.writeErr
}

// fullLocked reports ErrDiskFull if a frame of n more bytes would break the
// disk budget.
func (q *Queue) fullLocked(n int64) error {
	max := q.opts.MaxDiskBytes
	if max == 0 {
		return nil
	}
	// Besides the frame and its index entry, a rotation adds three file
	// headers, a time entry or two and an acknowledgement file.
	reserve := int64(3*fileHeaderSize+3*timeIndexEntrySize) + ackFileSize(q.recordCapacity())
	used := q.diskBytes.Load()
	if used+n+indexEntrySize+reserve <= max {
		return nil
	}
	return fmt.Errorf("%w: %d bytes used, %d more would pass MaxDiskBytes %d", ErrDiskFull, used, n, max)
}

// requestRollLocked asks the writer to roll the active segment when every
// record in it is acknowledged: on a full disk (the budget's or the file
// system's) no consumer will ever free that space otherwise.
func (q *Queue) requestRollLocked() {
	if q.ackFloor.Load() == q.nextSeq.Load() && !q.rollRequested.Load() {
		q.rollRequested.Store(true)
		q.wake()
	}
}

// waitForSpace blocks until space may have been freed: this queue
// deleted a segment (freed), or a while passed in which another process
// may have freed some. It returns early when ctx ends or the queue closes.
func (q *Queue) waitForSpace(ctx context.Context, freed <-chan struct{}) error {
	retry := time.NewTimer(fullRetryInterval)
	defer retry.Stop()
	select {
	case <-freed:
		return nil
	case <-retry.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-q.closeCh:
		return ErrClosed
	}
}

// waitSynced waits until every record below want is on stable storage, or
// a sticky error says it never will be. With round set it also waits for
// a writer round that started after round was read.
func (q *Queue) waitSynced(ctx context.Context, want uint64, round uint64, barrier bool) error {
	q.syncWaiters.Add(1)
	defer q.syncWaiters.Add(-1)
	q.wake()
	done := func() bool {
		return q.syncedSeq.Load() >= want && (!barrier || q.roundDone.Load() > round)
	}
	for {
		ch := q.synced.Wait()
		if done() {
			return nil
		}
		if err := q.failErr.Load(); err != nil {
			return *err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for fsync: %w", ctx.Err())
		case <-q.writerCh:
			// Closed: the writer's last round has run.
			if q.syncedSeq.Load() >= want {
				return nil
			}
			if err := q.failErr.Load(); err != nil {
				return *err
			}
			return ErrClosed
		}
	}
}

// wake tells the writer there is work, without blocking.
func (q *Queue) wake() {
	select {
	case q.wakeCh <- struct{}{}:
	default:
	}
}

// Sync waits until every record put before the call is on stable storage
// (with NoSync: in the kernel, where every record a Put returned for
// already is) and the writer goroutine has done one round of housekeeping:
// segments acknowledged before the call are deleted when it returns.
func (q *Queue) Sync(ctx context.Context) error {
	if q.readOnly {
		return ErrReadOnly
	}
	q.mu.Lock()
	if err := q.acceptingLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	want := q.nextSeq.Load()
	q.mu.Unlock()
	if err := q.waitSynced(ctx, want, q.roundStarted.Load(), true); err != nil {
		return fmt.Errorf("diskqueue: sync: %w", err)
	}
	return nil
}

// Depth returns the number of records put and not yet acknowledged,
// including those handed out by Read and still in flight.
func (q *Queue) Depth() int64 {
	return int64(q.nextSeq.Load()-q.ackFloor.Load()) - q.ackedAbove.Load()
}

// Close fsyncs every record put so far (unless NoSync), cuts the active
// segment's files to what was written, persists the read cursor and
// releases the directory. Reads and Puts blocked in
// other goroutines return [ErrClosed]. Records handed out by Read and not
// acknowledged are delivered again after the next Open. A second Close
// returns ErrClosed.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.closed = true
	q.mu.Unlock()
	q.isClosed.Store(true)
	close(q.closeCh)
	<-q.writerCh

	q.readMu.Lock()
	defer q.readMu.Unlock()
	q.segMu.Lock()
	defer q.segMu.Unlock()
	q.closeFiles()
	err := q.w.closeErr
	if err == nil {
		if ferr := q.failErr.Load(); ferr != nil {
			err = *ferr
		}
	}
	if q.lock != nil {
		if lerr := q.lock.Close(); err == nil && lerr != nil {
			err = fmt.Errorf("diskqueue: close lock: %w", lerr)
		}
	}
	return err
}

// closeFiles releases every file handle; the caller holds every lock or runs
// before any goroutine starts.
func (q *Queue) closeFiles() {
	for _, s := range q.segs {
		s.closeFiles()
		if s.ack != nil {
			s.ack.close()
			s.ack = nil
		}
	}
	q.w.closeFiles()
	if t := q.t; t != nil {
		// Open failed after the active segment was readied.
		for _, r := range []*region{&t.log, &t.index, &t.timeIdx} {
			r.release()
			if r.f != nil {
				r.f.Close()
			}
		}
		q.t = nil
	}
}

// Stats is a snapshot of a queue's cursors, sizes and counters.
type Stats struct {
	// Depth is the records not yet acknowledged: WriteSeq - ReadSeq, less
	// those above ReadSeq acknowledged out of order.
	Depth int64
	// InFlight is the records handed out by Read and not yet acknowledged.
	InFlight int64

	// FirstSeq is the oldest record still on disk (retained for replay or
	// not yet consumed); ReadAt of anything older returns ErrNotFound, as
	// it does for a segment deleted because every record in it was
	// acknowledged while an older one still held records.
	FirstSeq uint64
	// ReadSeq is the read cursor: the oldest record not yet acknowledged.
	ReadSeq uint64
	// WriteSeq is the write cursor: the seq the next Put gets.
	WriteSeq uint64
	// ReadPos and WritePos are the cursors as segment and byte offset.
	ReadPos, WritePos Position

	Segments  int   // segments on disk (those deleted as acknowledged ahead of an older one are not counted)
	DiskBytes int64 // bytes the log, index, time-index and acknowledgement files hold (not the preallocation ahead of the active segment's records; a sealed segment not read since Open has its time index estimated, within a few entries)

	Puts  int64 // records accepted by Put since Open
	Acks  int64 // records acknowledged since Open
	Syncs int64 // fsyncs of the log since Open

	// CorruptRecords counts records skipped because their bytes failed a
	// check; BadFiles counts the .bad files made for them since Open.
	CorruptRecords int64
	BadFiles       int64
	// IndexRebuilds counts index and time-index files rebuilt from their log.
	IndexRebuilds int64
	// ReadErrors counts I/O errors returned by reads (not corruption).
	ReadErrors int64
	// RetriedWrites counts Puts that found the disk full, waited
	// (BlockWhenFull) and then went through.
	RetriedWrites int64
	// WritePath is how Put reaches the kernel, chosen at Open: "mmap"
	// (records copied into preallocated, mapped segment files: no system
	// call per Put) or "write" (the producer's own write(2), where the OS
	// or file system cannot preallocate and map).
	WritePath string
	// SyncP50 and SyncP99 are fsync latencies of the log (the upper bound
	// of the histogram bucket holding each percentile, within 19%).
	SyncP50, SyncP99 time.Duration
}

// SyncLatencyBuckets returns the fsync latency histogram behind Stats'
// SyncP50 and SyncP99: the exclusive upper bound of each non-empty bucket
// and its count, bounds increasing.
func (q *Queue) SyncLatencyBuckets() (upper []time.Duration, counts []uint64) {
	return q.syncLatency.Snapshot()
}

// Position is a place in the log: the segment (named by its base seq) and a
// byte offset in it.
type Position struct {
	Segment uint64
	Offset  int64
}

// Stats returns a snapshot of the queue's state. It takes no lock on the
// write path.
func (q *Queue) Stats() Stats {
	st := Stats{
		InFlight:       q.inFlight.Load(),
		ReadSeq:        q.ackFloor.Load(),
		WriteSeq:       q.nextSeq.Load(),
		DiskBytes:      q.diskBytes.Load(),
		Puts:           int64(q.nextSeq.Load() - q.openSeq),
		Acks:           q.acks.Load(),
		Syncs:          q.syncs.Load(),
		CorruptRecords: q.corruptRecords.Load(),
		BadFiles:       q.badFiles.Load(),
		IndexRebuilds:  q.indexRebuilds.Load(),
		ReadErrors:     q.readErrors.Load(),
		RetriedWrites:  q.retriedWrites.Load(),
	}
	st.Depth = int64(st.WriteSeq-st.ReadSeq) - q.ackedAbove.Load()
	st.WritePath = "write"
	if q.mapped {
		st.WritePath = "mmap"
	}
	p := q.syncLatency.Percentiles(0.5, 0.99)
	st.SyncP50, st.SyncP99 = p[0], p[1]
	q.segMu.RLock()
	// Segments deleted as acknowledged behind an older one are not on disk.
	first := true
	for _, s := range q.segs {
		if s.gone.Load() {
			continue
		}
		st.Segments++
		if first {
			st.FirstSeq, first = s.base, false
		}
	}
	if len(q.segs) > 0 {
		last := q.segs[len(q.segs)-1]
		st.WritePos = Position{Segment: last.base, Offset: last.sizeNow()}
	}
	q.segMu.RUnlock()
	if pos, err := q.position(st.ReadSeq); err == nil {
		st.ReadPos = pos
	} else {
		st.ReadPos = st.WritePos
	}
	return st
}

// maxSeq is used where "no bound" is meant.
const maxSeq = math.MaxUint64
