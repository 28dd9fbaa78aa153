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

// Log is the durable, append-only part of a queue: the segment files, their
// sequence and time indexes, appends and fsyncs, recovery, lookups and
// retention. Consumers read it through [Cursor]s, each with its own read
// position and acknowledgements; a segment is deleted once every cursor
// has acknowledged all of it (and retention lets it go). A [Queue] is a Log
// with one cursor. A Log is safe for concurrent use.
type Log struct {
	dir    string
	opts   Options
	fs     fileSystem
	logger *slog.Logger
	lock   io.Closer

	// readOnly is set by OpenReadOnly: no lock, no writer, no repairs.
	readOnly bool
	// listing is the directory as Open read it; only during Open.
	listing map[string]os.DirEntry
	// started is when Open ran; record timestamps are it plus the
	// monotonic time since (see readClockLocked). startedNano is its wall
	// clock in Unix nanoseconds.
	started     time.Time
	startedNano int64
	// openSeq is nextSeq at Open: Puts since Open are the difference.
	openSeq uint64
	// lastMaxTime carries the running maximum of timestamps from one
	// segment to the next while Open recovers them.
	lastMaxTime int64

	// syncAlways is true when every Put waits for its record to be written
	// and (unless NoSync) fsynced: SyncEvery == 1.
	syncAlways bool

	// mu guards the fields below: the producer side. Producers append
	// under it (append.go).
	mu       sync.Mutex
	clock    clock   // record timestamps (clock.go)
	t        *tail   // the active segment; nil once Close has sealed it
	sealQ    []*tail // segments rotated out, for the writer to seal
	unsynced int     // records appended since the last fsync round began
	dirDirty bool    // segments were created since the last directory fsync
	closed   bool
	writeErr error // first failed write or fsync; sticky
	// mapped says appends copy into mapped, preallocated files; otherwise
	// each Put writes with write(2). Chosen at Open.
	mapped bool
	// cursors are the consumers of the log. Adding or removing one takes
	// mu, so appends (which create and grow each cursor's bitmap for the
	// active segment) see a fixed set; cursorList is the same slice for
	// readers that hold no lock.
	cursors    []*Cursor
	cursorList atomic.Pointer[[]*Cursor]
	// spare is the next segment's files, made ahead by the writer
	// goroutine (append.go); nil when there is none.
	spare *spare

	wakeCh   chan struct{} // capacity 1: there is work for the writer
	reqCh    chan request  // work for the writer goroutine to do in its turn
	closeCh  chan struct{} // closed by Close: tells every wait to give up
	isClosed atomic.Bool   // set with closeCh, for checks on hot paths
	writerCh chan struct{} // closed when the writer goroutine has returned
	// prepCh (capacity 1) wakes the preparer goroutine (prepare), which
	// closes prepDone when it returns. prepMu is held while it uses the
	// active segment's mapping outside mu, and by whatever unmaps a
	// segment being written (seal); never taken with mu held. dropMu
	// guards the active segment's dropped mark (dropWritten), moved by the
	// preparer (holding prepMu) and by the writer goroutine's syncs, which
	// need not wait behind a pre-fault: the writer goroutine is the one
	// that unmaps. It is taken last, with no other lock taken under it.
	prepCh   chan struct{}
	prepDone chan struct{}
	prepMu   sync.Mutex
	dropMu   sync.Mutex
	// compactCh (capacity 1) is held by the Compact running: one at a
	// time per log.
	compactCh chan struct{}

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

	// segSet is the segment list, l.segs under l.segMu (segset.go).
	segSet
	// openSegs are the sealed segments whose read handles may be open,
	// kept to a bound (segment.go).
	openSegs segCache

	// w is the writer goroutine's state.
	w writer

	nextSeq logEnd // seq the next Put gets

	// Gauges and counters for Stats, readable without a lock.
	diskBytes     atomic.Int64 // bytes written to every segment's files
	rollRequested atomic.Bool
	// punchRequested says a Put found the file system full with only a
	// prefix of the active segment acknowledged (requestRollLocked).
	punchRequested atomic.Bool
	// ackedSealing says the writer's last look for segments to delete
	// found acknowledged ones it could not delete yet, still being sealed
	// (mayMakeRoomLocked).
	ackedSealing     atomic.Bool
	corruptRecords   atomic.Int64
	badFiles         atomic.Int64
	indexRebuilds    atomic.Int64
	readErrors       atomic.Int64
	syncs            atomic.Int64
	retriedWrites    atomic.Int64
	droppedRecords   atomic.Int64        // given up by drop-when-full cursors (discard.go)
	heldFrom         atomic.Uint64       // 1 + the seq HoldFrom holds segments from; 0 for none (retention.go)
	holdPressure     chan struct{}       // capacity 1: a Put at the budget found held segments (HoldPressure)
	acksLooked       atomic.Int64        // the cursors' acks (acksSum) when the writer's last look for segments to delete began, stored once it has deleted them; -1 while it looks
	compactedRecords atomic.Int64        // removed by Compact (compact.go)
	compactedBytes   atomic.Int64        // log bytes Compact freed
	sparesUsed       atomic.Int64        // rotations that renamed a spare into place
	syncLatency      histogram.Histogram // duration of each fsync of the log
}

// logEnd is the seq the next Put gets: the end the log's last segment
// published. Derived, not stored beside it, so a Put publishes its record
// with one atomic store (setExtent; a second costs about 10 ns on the
// project's machine), and Depth (nextSeq - floor) cannot dip below what a
// reader has acknowledged. Set at Open and by each rotation, under mu;
// the segment object outlives its files.
type logEnd struct{ last atomic.Pointer[segment] }

func (e *logEnd) Load() uint64 { return e.last.Load().endNow() }

// Record is one record read from the log. Body belongs to the caller.
type Record struct {
	Seq  uint64    // position in the log; consecutive, starting where the log started
	Time time.Time // when Put stored it: the wall clock at Open plus the monotonic time since, read at most 64 records and normally about 1 ms before the Put
	Body []byte
}

// OpenLog opens the log in dir, creating the directory if needed, and
// recovers from whatever state a crash left it in (see FORMAT.md), with
// the cursors stored beside it. Only one Log (or Queue) may have a
// directory open at a time; a second returns [ErrLocked].
func OpenLog(dir string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := newLog(dir, o)
	if o.HoldAtOpen {
		l.HoldFrom(0)
	}
	if err := l.fs.MkdirAll(dir, o.dirMode); err != nil {
		return nil, fmt.Errorf("diskqueue: open: %w", err)
	}
	lock, err := l.fs.Lock(filepath.Join(dir, lockName), o.FileMode)
	if err != nil {
		return nil, fmt.Errorf("diskqueue: open %s: %w", dir, err)
	}
	l.lock = lock
	if err := l.recover(); err != nil {
		l.closeFiles()
		lock.Close()
		return nil, err
	}
	go l.run()
	go l.prepare()
	return l, nil
}

// openLogReadOnly is OpenReadOnly's log: no lock, no writer, no repairs.
func openLogReadOnly(dir string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := newLog(dir, o)
	l.readOnly = true
	close(l.writerCh) // there is no writer to wait for
	close(l.prepDone) // nor a preparer
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

func newLog(dir string, o Options) *Log {
	now := time.Now()
	l := &Log{
		dir:         dir,
		started:     now,
		startedNano: now.UnixNano(),
		opts:        o,
		fs:          o.fsForTesting,
		logger:      o.Logger.With("queue", dir),
		syncAlways:  o.SyncEvery == 1,
		wakeCh:      make(chan struct{}, 1),
		reqCh:       make(chan request),
		closeCh:     make(chan struct{}),
		writerCh:    make(chan struct{}),
		prepCh:      make(chan struct{}, 1),
		prepDone:    make(chan struct{}),
		compactCh:   make(chan struct{}, 1),
		openSegs:    segCache{bound: o.openSealedForTesting},

		holdPressure: make(chan struct{}, 1),
	}
	l.cursorList.Store(new([]*Cursor))
	l.clock.init()
	return l
}

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
	if err := l.checkBody(body); err != nil {
		return 0, err
	}
	if l.readOnly {
		return 0, ErrReadOnly
	}
	var flags [1]byte
	stored := [1][]byte{body}
	if l.opts.Compress {
		stored[0], flags[0] = compress(body)
	}
	n, seq, err := l.putRecords(ctx, flags[:], stored[:])
	if n == 0 {
		return 0, err
	}
	return seq, err
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
		if err := l.checkBody(body); err != nil {
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
	n, _, err := l.putRecords(ctx, flags, stored)
	return n, err
}

// checkBody checks a body against MaxRecordBytes and MinRecordBytes; small
// enough to be inlined into Put.
func (l *Log) checkBody(body []byte) error {
	if len(body) > l.opts.MaxRecordBytes || len(body) < l.opts.MinRecordBytes {
		return l.bodySizeError(body)
	}
	return nil
}

func (l *Log) bodySizeError(body []byte) error {
	if n := len(body); n > l.opts.MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, n, l.opts.MaxRecordBytes)
	}
	return fmt.Errorf("%w: %d bytes, minimum %d", ErrRecordTooSmall, len(body), l.opts.MinRecordBytes)
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
// last of them. It returns how many it stored and the first error.
func (l *Log) putRecords(ctx context.Context, flags []byte, stored [][]byte) (n int, last uint64, err error) {
	if l.syncAlways && !l.opts.NoSync {
		// A ctx that has ended stores nothing: stored, the records would
		// come back with ErrNotDurable, their Put neither done nor undone.
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("diskqueue: put: %w", err)
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
			if err = l.fullLocked(int64(frameSize(len(stored[n])))); err != nil {
				budget = true
				break
			}
			var f byte
			if flags != nil {
				f = flags[n]
			}
			var seq uint64
			if seq, err = l.appendLocked(f, stored[n]); err != nil {
				break
			}
			last = seq
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
		if drop && l.dropForRoom(ctx, int64(frameSize(len(stored[n])))) {
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
		if werr := l.waitForSpace(ctx, wait); werr != nil {
			// Both: the caller may test for either.
			err = fmt.Errorf("%w; stopped waiting for space: %w", err, werr)
			break
		}
		waited = true
	}
	if n == 0 || !l.syncAlways || l.opts.NoSync {
		return n, last, err
	}
	if serr := l.waitSynced(ctx, last+1, 0, false); serr != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(serr, cerr) {
			serr = fmt.Errorf("diskqueue: put: %w (%w)", ErrNotDurable, serr)
		} else {
			serr = fmt.Errorf("diskqueue: put: %w", serr)
		}
		if err == nil {
			return n, last, serr
		}
		return n, last, errors.Join(err, serr)
	}
	return n, last, err
}

// acceptingLocked returns why the queue takes no more writes: closed, or a
// sticky write error.
func (l *Log) acceptingLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.writeErr
}

// fullLocked reports ErrDiskFull if a frame of n more bytes would break the
// disk budget.
func (l *Log) fullLocked(n int64) error {
	max := l.opts.MaxDiskBytes
	if max == 0 {
		return nil
	}
	used := l.diskBytes.Load()
	if l.t != nil {
		used += l.t.unaccounted
	}
	if used+l.budgetLocked(n) <= max {
		return nil
	}
	return fmt.Errorf("%w: %d bytes used, %d more would pass MaxDiskBytes %d", ErrDiskFull, used, n, max)
}

// budgetLocked is what a frame of n bytes needs of the disk budget, beyond
// what the log holds. Besides the frame and its index entry, the record
// takes a bit in each cursor's bitmap (at worst a byte more in each), and a
// rotation adds three file headers, a time entry or two and each cursor's
// bitmap header: what diskBytes will count for them (segment.diskBytes).
func (l *Log) budgetLocked(n int64) int64 { return budgetFor(n, len(l.cursors)) }

// budgetFor is budgetLocked for a log with the given number of cursors.
func budgetFor(n int64, cursors int) int64 {
	bitmaps := int64(cursors)
	reserve := int64(3*fileHeaderSize+3*timeIndexEntrySize) + bitmaps*ackHeaderSize
	return n + indexEntrySize + bitmaps + reserve
}

// emptyLogBytes is what a log holding no record takes of the disk
// budget: one segment's three file headers and each cursor's bitmap
// header.
func emptyLogBytes(cursors int) int64 {
	return int64(3*fileHeaderSize) + int64(cursors)*ackHeaderSize
}

// requestRollLocked asks the writer to roll the active segment when every
// record in it is acknowledged: on a full disk (the budget's or the file
// system's) no consumer will ever free that space otherwise. With fsFull
// (the file system's, not the budget's) it asks as well when only a prefix
// of the active segment is acknowledged: the writer frees that prefix's
// blocks in place (recycleActiveLocked), so that consumers who keep up
// free room for as much as they acknowledged, though a segment goes whole
// only once all of it is.
//
// It reports whether the roll is coming and will free the active segment's
// space: it holds records, every one acknowledged (or, with fsFull, a
// prefix worth freeing), and HoldFrom does not keep it.
func (l *Log) requestRollLocked(fsFull bool) bool {
	consumed := l.consumedLocked()
	if !consumed && !(fsFull && l.punchableLocked() > 0) {
		return false
	}
	if !consumed && !l.punchRequested.Load() {
		l.punchRequested.Store(true)
	}
	if !l.rollRequested.Load() {
		l.rollRequested.Store(true)
		l.wake()
	}
	t := l.t
	return t != nil && t.end > t.seg.base && (!consumed || !l.held(t.seg))
}

// rollConsumedLocked rolls the active segment if every cursor has
// acknowledged every record in it, so that it can go once sealed; on a file
// system too full for the next segment it frees the active one's blocks in
// place first (recycleActiveLocked). With punch (a Put found the file
// system full) it frees those of the acknowledged prefix when not every
// record is acknowledged. It reports whether it rolled or freed space. The
// caller holds l.mu and is the writer goroutine.
func (l *Log) rollConsumedLocked(punch bool) bool {
	t := l.t
	if t == nil || t.end == t.seg.base || l.writeErr != nil {
		return false
	}
	var err error
	if !l.consumedLocked() {
		if !punch {
			return false
		}
		err = l.recycleActiveLocked()
	} else if err = l.rotateLocked(); errors.Is(err, ErrDiskFull) {
		// No room even for the next segment's first pages: the active
		// one holds nothing unacknowledged, so it goes first.
		err = l.recycleActiveLocked()
	}
	if err != nil && !errors.Is(err, ErrDiskFull) {
		l.failLocked(err)
	}
	return err == nil
}

// acksSum is how many acknowledgements the log's cursors have made since
// Open. The writer notes it each time housekeeping has deleted what every
// cursor has acknowledged (acksLooked): a Put at the budget that sees it
// moved since asks the writer to make room at once (makeRoom, which
// deletes only as much as the Put needs, so the next such Put asks too)
// rather than fail while the space it needs is acknowledged.
func (l *Log) acksSum() int64 {
	var n int64
	for _, c := range *l.cursorList.Load() {
		n += c.acks.Load()
	}
	return n
}

// consumedLocked reports whether every cursor has acknowledged every
// record (false with no cursor: nothing is consumed). The caller holds
// l.mu.
func (l *Log) consumedLocked() bool {
	end := l.nextSeq.Load()
	for _, c := range l.cursors {
		if c.ackFloor.Load() != end {
			return false
		}
	}
	return len(l.cursors) > 0
}

// waitForSpace blocks until space may have been freed: this queue
// deleted a segment (freed), or a while passed in which another process
// may have freed some. It returns early when ctx ends or the queue closes.
func (l *Log) waitForSpace(ctx context.Context, freed <-chan struct{}) error {
	retry := time.NewTimer(fullRetryInterval)
	defer retry.Stop()
	select {
	case <-freed:
		return nil
	case <-retry.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.closeCh:
		return ErrClosed
	}
}

// waitSynced waits until every record below want is on stable storage, or
// a sticky error says it never will be. With round set it also waits for
// a writer round that started after round was read.
func (l *Log) waitSynced(ctx context.Context, want uint64, round uint64, barrier bool) error {
	l.syncWaiters.Add(1)
	defer l.syncWaiters.Add(-1)
	l.wake()
	done := func() bool {
		return l.syncedSeq.Load() >= want && (!barrier || l.roundDone.Load() > round)
	}
	for {
		ch := l.synced.Wait()
		if done() {
			return nil
		}
		if err := l.failErr.Load(); err != nil {
			return *err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for fsync: %w", ctx.Err())
		case <-l.writerCh:
			// Closed: the writer's last round has run.
			if l.syncedSeq.Load() >= want {
				return nil
			}
			if err := l.failErr.Load(); err != nil {
				return *err
			}
			return ErrClosed
		}
	}
}

// wake tells the writer there is work, without blocking.
func (l *Log) wake() {
	select {
	case l.wakeCh <- struct{}{}:
	default:
	}
}

// Sync waits until every record put before the call is on stable storage
// (with NoSync: in the kernel, where every record a Put returned for
// already is) and the writer goroutine has done one round of housekeeping:
// segments acknowledged before the call are deleted when it returns.
func (l *Log) Sync(ctx context.Context) error {
	if l.readOnly {
		return ErrReadOnly
	}
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	want := l.nextSeq.Load()
	l.mu.Unlock()
	if err := l.waitSynced(ctx, want, l.roundStarted.Load(), true); err != nil {
		return fmt.Errorf("diskqueue: sync: %w", err)
	}
	return nil
}

// Close fsyncs every record put so far (unless NoSync), cuts the active
// segment's files to what was written, persists the read cursor and
// releases the directory. Reads and Puts blocked in
// other goroutines return [ErrClosed], and a [Log.Compact] under way gives
// up (Close waits for it to remove its files). Records handed out by Read and not
// acknowledged are delivered again after the next Open. A second Close
// returns ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	l.isClosed.Store(true)
	close(l.closeCh)
	<-l.writerCh
	<-l.prepDone
	// A Compact under way gives up at its next step and removes its
	// files; none starts after. Before the files close and the directory
	// is released, so nothing of it outlives Close.
	l.compactCh <- struct{}{}

	for _, c := range *l.cursorList.Load() {
		c.closeFiles()
	}
	l.segMu.Lock()
	defer l.segMu.Unlock()
	l.closeFiles()
	err := l.w.closeErr
	if err == nil {
		if ferr := l.failErr.Load(); ferr != nil {
			err = *ferr
		}
	}
	if l.lock != nil {
		if lerr := l.lock.Close(); err == nil && lerr != nil {
			err = fmt.Errorf("diskqueue: close lock: %w", lerr)
		}
	}
	return err
}

// closeFiles releases every file handle; the caller holds every lock or runs
// before any goroutine starts.
func (l *Log) closeFiles() {
	for _, s := range l.segs {
		s.closeFiles()
	}
	for _, c := range l.cursors {
		c.closeFiles()
	}
	if t := l.t; t != nil {
		// Open failed after the active segment was readied.
		t.close()
		l.t = nil
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
	// ReadPos.Offset is -1 when Stats would need an index read to know it
	// (records below the read position are in flight, or were acknowledged
	// out of order); [Log.Position] finds it.
	ReadPos, WritePos Position

	Segments  int   // segments on disk (those deleted as acknowledged ahead of an older one are not counted)
	DiskBytes int64 // bytes the log, index, time-index and acknowledgement files hold (not the preallocation ahead of the active segment's records; a sealed segment not read since Open has its time index estimated, within a few entries; the active segment's newest records, under 4 KiB of log and their index entries, are counted at the next time-index entry or writer round, the disk budget counts them at once)

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
	// DroppedRecords counts the records cursors set to drop when full
	// ([Cursor.SetDropWhenFull]) gave up unacknowledged at MaxDiskBytes
	// since Open, summed over those cursors; [CursorStats].Dropped has each
	// one's.
	DroppedRecords int64
	// CompactedRecords counts the records [Log.Compact] removed since
	// Open; CompactedBytes the log bytes it freed doing so.
	CompactedRecords int64
	CompactedBytes   int64
	// MaxDiskBytes is Options.MaxDiskBytes, the budget DiskBytes is held
	// to (0: none).
	MaxDiskBytes int64
	// WriteErr is the sticky write or fsync error that stopped the log
	// taking writes (see the package doc); nil while it takes them.
	// Closed says Close was called.
	WriteErr error
	Closed   bool
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
func (l *Log) SyncLatencyBuckets() (upper []time.Duration, counts []uint64) {
	return l.syncLatency.Snapshot()
}

// Position is a place in the log: the segment (named by its base seq) and a
// byte offset in it.
type Position struct {
	Segment uint64
	Offset  int64
}

// NextSeq returns the seq the next record put will get: one atomic load,
// for callers that track how far behind the end of the log they are. A
// record may be readable through a cursor a moment before NextSeq counts it.
func (l *Log) NextSeq() uint64 { return l.nextSeq.Load() }

// Stats returns a snapshot of the log's state. It takes no lock on the
// write path and does no I/O. Its cursor fields (Depth, InFlight, ReadSeq, ReadPos, Acks)
// are those of the cursor furthest behind, the one retention waits on (for
// a Queue: its cursor); with no cursor, ReadSeq is WriteSeq. Each cursor's
// own figures are in [Cursor.Stats].
func (l *Log) Stats() Stats {
	var slowest *Cursor
	for _, c := range *l.cursorList.Load() {
		if slowest == nil || c.ackFloor.Load() < slowest.ackFloor.Load() {
			slowest = c
		}
	}
	return l.stats(slowest)
}

// stats is Stats with the cursor fields of c (none if nil).
func (l *Log) stats(c *Cursor) Stats {
	st := Stats{
		WriteSeq:       l.nextSeq.Load(),
		DiskBytes:      l.diskBytes.Load(),
		Puts:           int64(l.nextSeq.Load() - l.openSeq),
		Syncs:          l.syncs.Load(),
		CorruptRecords: l.corruptRecords.Load(),
		BadFiles:       l.badFiles.Load(),
		IndexRebuilds:  l.indexRebuilds.Load(),
		ReadErrors:     l.readErrors.Load(),
		RetriedWrites:  l.retriedWrites.Load(),
		DroppedRecords: l.droppedRecords.Load(),

		CompactedRecords: l.compactedRecords.Load(),
		CompactedBytes:   l.compactedBytes.Load(),
		MaxDiskBytes:     l.opts.MaxDiskBytes,
		Closed:           l.isClosed.Load(),
	}
	if err := l.failErr.Load(); err != nil {
		st.WriteErr = *err
	}
	st.ReadSeq = st.WriteSeq
	if c != nil {
		cs := c.Stats()
		st.ReadSeq, st.Depth, st.InFlight, st.Acks = cs.ReadSeq, cs.Depth, cs.InFlight, cs.Acks
	}
	st.WritePath = "write"
	if l.mapped {
		st.WritePath = "mmap"
	}
	p := l.syncLatency.Percentiles(0.5, 0.99)
	st.SyncP50, st.SyncP99 = p[0], p[1]
	// Segments deleted as acknowledged behind an older one are not on disk.
	sum := l.summary()
	st.Segments, st.FirstSeq, st.WritePos = sum.onDisk, sum.firstSeq, sum.writePos
	st.ReadPos = st.WritePos
	if c != nil {
		st.ReadPos = c.floorPosition(st.WritePos)
	}
	return st
}

// Position returns where the record seq starts: its segment and byte
// offset, with one read of the sequence index. seq may be the next to be
// put (WriteSeq). It returns [ErrNotFound] for a seq not in the log.
func (l *Log) Position(seq uint64) (Position, error) {
	if l.isClosed.Load() {
		return Position{}, ErrClosed
	}
	return l.position(seq)
}

// maxSeq is used where "no bound" is meant.
const maxSeq = math.MaxUint64
