package godq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue"
)

// minSegmentBytes is the smallest segment NewCompat asks for. go-diskqueue
// takes any maxBytesPerFile; diskqueue needs room for a segment header and
// a record, and a larger segment than asked for cannot be seen through
// go-diskqueue's Interface.
const minSegmentBytes = 1 << 10

// NewCompat opens a queue with the signature and the behaviour of
// github.com/nsqio/go-diskqueue's New (but for the differences below), so
// code written for nsqd's disk queue switches with one line. The queue lives in dataPath/name.spillq/, so many
// queues can share one data path as they do in nsqd.
//
// Reading from ReadChan acknowledges the record, as in go-diskqueue, in
// the kernel at once: a crash of the process loses the record in hand
// (taken from ReadChan, not yet processed) and delivers none taken before
// again, where go-diskqueue delivers again everything read since its last
// metadata sync. The queue reads records ahead of the receivers, up to two
// batches of at most 64 records each, sized from the last batch to about
// 64 KiB (go-diskqueue reads one ahead); a record read ahead is not
// consumed until a receiver takes it, so a crash or Close leaves it in the
// queue. Unlike go-diskqueue, records are checksummed, a damaged
// record costs only itself rather than the rest of its file, and with
// syncEvery 1 Put returns only once the record is fsynced. syncEvery <= 0
// means every record (go-diskqueue's 0 does too; its negative values
// fsync only on syncTimeout); syncTimeout <= 0 means the default of 2
// seconds; maxMsgSize <= 0 means the default of 1 MiB. Delete removes the
// queue's files (go-diskqueue's only closes the queue, leaving them; nsqd
// calls Empty first, so for nsqd the two end the same).
//
// A backlog that go-diskqueue left under the same name and path
// (name.diskqueue.meta.dat and its data files) is imported on open: its
// unread records, from the read position in its metadata, are put into the
// spillq queue ahead of anything new, then the go-diskqueue files are
// removed (a damaged one is kept as .bad, as go-diskqueue does), and logf
// says what happened. A crash during the import loses nothing and puts no
// record twice: the next open resumes it. Do not run go-diskqueue on the
// same files at the same time.
//
// go-diskqueue's New cannot fail, so neither can this: if the queue cannot
// be opened (another process holds it, say) or the backlog cannot be
// imported, the error is logged through logf and returned by every method.
func NewCompat(name string, dataPath string, maxBytesPerFile int64,
	minMsgSize int32, maxMsgSize int32,
	syncEvery int64, syncTimeout time.Duration, logf godiskqueue.AppLogFunc) godiskqueue.Interface {
	return newCompat(name, dataPath, maxBytesPerFile, minMsgSize, maxMsgSize, syncEvery, syncTimeout, logf, nil)
}

// newCompat is NewCompat with the import's crash points (see importer).
func newCompat(name string, dataPath string, maxBytesPerFile int64,
	minMsgSize int32, maxMsgSize int32,
	syncEvery int64, syncTimeout time.Duration, logf godiskqueue.AppLogFunc,
	crashPointForTesting func(point string)) godiskqueue.Interface {
	if logf == nil {
		logf = func(godiskqueue.LogLevel, string, ...interface{}) {}
	}
	c := &compatQueue{
		name:       name,
		dir:        filepath.Join(dataPath, name+".spillq"),
		readChan:   make(chan []byte),
		batchCh:    make(chan []diskqueue.Record),
		spareCh:    make(chan []diskqueue.Record, 2),
		ctlCh:      make(chan ctlRequest),
		exitCh:     make(chan struct{}),
		pumpDone:   make(chan struct{}),
		readerDone: make(chan struct{}),
		logf:       logf,
	}
	if syncEvery <= 0 {
		syncEvery = 1
	}
	if syncTimeout <= 0 {
		syncTimeout = diskqueue.DefaultSyncInterval
	}
	opts := diskqueue.Options{
		MaxSegmentBytes: min(max(maxBytesPerFile, minSegmentBytes), math.MaxUint32),
		MinRecordBytes:  int(max(minMsgSize, 0)),
		MaxRecordBytes:  int(max(maxMsgSize, 0)),
		SyncEvery:       int(min(syncEvery, int64(math.MaxInt))),
		SyncInterval:    syncTimeout,
		Logger:          slog.New(&logfHandler{logf: logf, prefix: fmt.Sprintf("DISKQUEUE(%s): ", name)}),
	}
	err := importBacklog(c.dir, dataPath, name, opts, logf, crashPointForTesting)
	var q *diskqueue.Queue
	if err == nil {
		q, err = diskqueue.Open(c.dir, opts)
	}
	if err != nil {
		logf(godiskqueue.ERROR, "DISKQUEUE(%s) failed to open - %s", name, err)
		c.err = err
		close(c.pumpDone)
		close(c.readerDone)
		return c
	}
	c.q = q
	var readCtx context.Context
	readCtx, c.stopReading = context.WithCancel(context.Background())
	go c.read(readCtx)
	go c.pump()
	return c
}

// compatQueue is a diskqueue.Queue behind go-diskqueue's Interface. It is
// safe for concurrent use.
type compatQueue struct {
	name string
	dir  string
	q    *diskqueue.Queue // nil if it could not be opened
	err  error            // why the queue could not be opened
	logf godiskqueue.AppLogFunc

	readChan chan []byte             // the pump hands records to consumers here
	batchCh  chan []diskqueue.Record // the reader hands batches of records to the pump here
	spareCh  chan []diskqueue.Record // the pump gives handed-out batches back for reuse
	ctlCh    chan ctlRequest         // Depth and Empty, served by the pump

	exitCh      chan struct{} // closed by Close and Delete, for the reader
	stopReading context.CancelFunc
	pumpDone    chan struct{}
	readerDone  chan struct{}

	// batches counts the batches the reader has handed to the pump.
	batches atomic.Int64

	// mu guards exited.
	mu     sync.Mutex
	exited bool
}

// Reading ahead in batches: the reader takes the records ready (up to
// maxBatch, and about batchBytes of bodies) with one ReadBatch and hands
// them to the pump in one channel send. Handed over one by one, every
// record cost two goroutine hand-offs, the reader's to the pump and the
// pump's to the consumer, where go-diskqueue's ioLoop pays one; the drain
// of a backlog ran at go-diskqueue's rate. A record read ahead is in flight,
// not acknowledged: it stays in the queue until a receiver takes it, so
// the batch changes what is held in memory, not what is consumed.
const (
	maxBatch   = 64
	batchBytes = 64 << 10
)

// read takes records from the queue in order and offers them to the pump
// in batches. A record it or the pump holds when the queue exits is not
// acknowledged, so it stays in the queue.
func (c *compatQueue) read(ctx context.Context) {
	defer close(c.readerDone)
	n := 1 // the next batch's length (batchLen); the first is one record, the size unknown
	for {
		var batch []diskqueue.Record
		select {
		case batch = <-c.spareCh:
		default:
			batch = make([]diskqueue.Record, maxBatch)
		}
		got, err := c.q.ReadBatch(ctx, batch[:n])
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, diskqueue.ErrClosed) {
				return
			}
			c.logf(godiskqueue.ERROR, "DISKQUEUE(%s) reading - %s", c.name, err)
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-c.exitCh:
				return
			}
		}
		batch = batch[:got]
		n = batchLen(batch)
		select {
		case c.batchCh <- batch:
			c.batches.Add(1)
		case <-c.exitCh:
			return
		}
	}
}

// batchLen is how many records the next batch may take, from the bodies
// of the last: about batchBytes of them, so that records of a MiB are read
// ahead one at a time, as go-diskqueue does.
func batchLen(last []diskqueue.Record) int {
	size := 0
	for _, r := range last {
		size += len(r.Body)
	}
	avg := max(size/max(len(last), 1), 1)
	return min(max(batchBytes/avg, 1), maxBatch)
}

// ctlRequest asks the pump for Depth (depth set), Empty (empty set) or to
// stop (neither).
type ctlRequest struct {
	depth chan int64
	empty chan error
}

// pump is the one goroutine that hands records to ReadChan, in the shape
// of go-diskqueue's ioLoop: Depth and Empty are served between hand-offs,
// so a receiver that calls Depth right after taking a record sees it gone,
// and Empty never lets an already-read record out afterwards. A record
// counts as read once a receiver takes it, and the pump acknowledges it,
// in the kernel, before it does anything else; one taken by nobody before
// Close stays in the queue.
func (c *compatQueue) pump() {
	defer close(c.pumpDone)
	var (
		batch []diskqueue.Record
		next  int // batch[next:] are not handed out yet
		// floor is the read cursor after the last Empty: a record below it
		// was read before Empty discarded it.
		floor uint64
	)
	done := func() {
		clear(batch) // drop the bodies, which the consumers own now
		select {
		case c.spareCh <- batch[:cap(batch)]:
		default:
		}
		batch, next = nil, 0
	}
	take := func(b []diskqueue.Record) {
		batch, next = b, 0
		for next < len(batch) && batch[next].Seq < floor {
			next++
		}
		if next == len(batch) {
			done()
		}
	}
	handedOut := func() {
		seq := batch[next].Seq
		next++
		if err := c.q.Ack(seq); err != nil {
			c.logf(godiskqueue.ERROR, "DISKQUEUE(%s) ack %d - %s", c.name, seq, err)
		}
		if next == len(batch) {
			done()
		}
	}
	// serve reports false for a request to stop.
	serve := func(req ctlRequest) bool {
		if req.depth != nil {
			req.depth <- c.q.Depth()
			return true
		}
		if req.empty == nil {
			return false
		}
		if batch != nil {
			done()
		}
		err := c.q.Empty()
		// Only the pump acknowledges, so the floor Empty left is still
		// where it put it.
		floor = c.q.Stats().ReadSeq
		req.empty <- err
		return true
	}
	for {
		if next < len(batch) {
			// A drain's common case, a receiver already waiting, without
			// a select: each of these looks at one channel, and one that
			// is not ready costs no lock. A select locks every channel it
			// names, twice if it waits.
			select {
			case req := <-c.ctlCh:
				if !serve(req) {
					return
				}
				continue
			default:
			}
			select {
			case c.readChan <- batch[next].Body:
				handedOut()
				continue
			default:
			}
			select {
			case c.readChan <- batch[next].Body:
				handedOut()
			case req := <-c.ctlCh:
				if !serve(req) {
					return
				}
			}
			continue
		}
		select {
		case b := <-c.batchCh:
			take(b)
		case req := <-c.ctlCh:
			if !serve(req) {
				return
			}
		}
	}
}

func (c *compatQueue) Put(data []byte) error {
	if c.err != nil {
		return c.err
	}
	return c.q.Put(context.Background(), data)
}

// ReadChan returns the unbuffered channel records are delivered on.
func (c *compatQueue) ReadChan() <-chan []byte { return c.readChan }

// Depth counts records not yet taken from ReadChan.
func (c *compatQueue) Depth() int64 {
	if c.err != nil {
		return 0
	}
	reply := make(chan int64, 1)
	select {
	case c.ctlCh <- ctlRequest{depth: reply}:
		return <-reply
	case <-c.pumpDone:
		return c.q.Depth()
	}
}

// Empty discards every record.
func (c *compatQueue) Empty() error {
	if c.err != nil {
		return c.err
	}
	c.logf(godiskqueue.INFO, "DISKQUEUE(%s): emptying", c.name)
	reply := make(chan error, 1)
	select {
	case c.ctlCh <- ctlRequest{empty: reply}:
		return <-reply
	case <-c.pumpDone:
		return diskqueue.ErrClosed
	}
}

// Close persists every record put and the read position.
func (c *compatQueue) Close() error {
	return c.exit(false)
}

// Delete closes the queue and removes its files.
func (c *compatQueue) Delete() error {
	return c.exit(true)
}

func (c *compatQueue) exit(remove bool) error {
	c.mu.Lock()
	if c.exited {
		c.mu.Unlock()
		return diskqueue.ErrClosed
	}
	c.exited = true
	c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if remove {
		c.logf(godiskqueue.INFO, "DISKQUEUE(%s): deleting", c.name)
	} else {
		c.logf(godiskqueue.INFO, "DISKQUEUE(%s): closing", c.name)
	}
	close(c.exitCh)
	c.stopReading()
	c.ctlCh <- ctlRequest{} // stop
	<-c.pumpDone
	<-c.readerDone
	err := c.q.Close()
	if remove {
		if rerr := os.RemoveAll(c.dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// importBacklog imports the go-diskqueue backlog named name in dataPath,
// if there is one, into the queue in dir (see importer). The queue is
// opened for the import alone, with an fsync only at the end: the caller's
// policy (every record, by default) would cost one fsync per record, and
// an import cut short by a crash resumes where the queue's records end.
func importBacklog(dir, dataPath, name string, opts diskqueue.Options, logf godiskqueue.AppLogFunc, crashPoint func(string)) error {
	im := &importer{
		dataPath: dataPath, name: name, logf: logf,
		minBody: opts.MinRecordBytes, maxBody: opts.MaxRecordBytes,
		crashPoint: crashPoint,
	}
	if im.maxBody == 0 {
		im.maxBody = diskqueue.DefaultMaxRecordBytes
	}
	if !im.pending() {
		return nil
	}
	opts.SyncEvery = math.MaxInt
	q, err := diskqueue.Open(dir, opts)
	if err != nil {
		return err
	}
	im.q = q
	err = im.run(context.Background())
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	return err
}

// logfHandler turns slog records into go-diskqueue AppLogFunc calls.
type logfHandler struct {
	logf   godiskqueue.AppLogFunc
	prefix string
	attrs  []slog.Attr
}

func (h *logfHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logfHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	lvl := godiskqueue.INFO
	switch {
	case r.Level >= slog.LevelError:
		lvl = godiskqueue.ERROR
	case r.Level >= slog.LevelWarn:
		lvl = godiskqueue.WARN
	case r.Level < slog.LevelInfo:
		lvl = godiskqueue.DEBUG
	}
	h.logf(lvl, "%s", b.String())
	return nil
}

func (h *logfHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logfHandler{logf: h.logf, prefix: h.prefix, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *logfHandler) WithGroup(string) slog.Handler { return h }
