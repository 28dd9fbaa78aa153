package diskqueue

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/internal/broadcast"
	"github.com/spillq/spillq/internal/vfs"
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
	// under it (put.go, append.go).
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
	// cursorRegistry is the consumers of the log (cursors.go).
	cursorRegistry
	// spare is the next segment's files, made ahead by the writer
	// goroutine (segcreate.go); nil when there is none.
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
	// kept to a bound (segcache.go).
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
	ackedSealing atomic.Bool
	heldFrom     atomic.Uint64 // 1 + the seq HoldFrom holds segments from; 0 for none (retention.go)
	holdPressure chan struct{} // capacity 1: a Put at the budget found held segments (HoldPressure)
	acksLooked   atomic.Int64  // the cursors' acks (acksSum) when the writer's last look for segments to delete began, stored once it has deleted them; -1 while it looks
	// counters are the events Stats counts (stats.go): l.syncs and the
	// rest.
	counters
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
	if err := l.mkdirAll(dir); err != nil {
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
		fs:          o.FS,
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

// NextSeq returns the seq the next record put will get: one atomic load,
// for callers that track how far behind the end of the log they are. A
// record may be readable through a cursor a moment before NextSeq counts it.
func (l *Log) NextSeq() uint64 { return l.nextSeq.Load() }

// maxSeq is used where "no bound" is meant.
const maxSeq = math.MaxUint64

// mkdirAll makes dir and any missing parents, fsyncing the parent of each
// it makes (unless NoSync): the log's fsyncs cover its files, and a file
// in a directory whose own entry a power cut took away is lost with it.
func (l *Log) mkdirAll(dir string) error {
	if l.opts.NoSync {
		return l.fs.MkdirAll(dir, l.opts.dirMode)
	}
	return vfs.MkdirAllSynced(l.fs, dir, l.opts.dirMode)
}
