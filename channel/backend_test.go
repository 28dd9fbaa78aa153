package channel_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/memlog"
)

// memStore is an in-memory store (internal/memlog: a Log and one cursor
// over it) with the real contract: records stay until acknowledged, and
// reopen() makes the unacknowledged ones readable again, as a restart
// would. It serves as a channel's Backend, timer store or delivery journal.
type memStore struct {
	log     *memlog.Log
	cur     *memlog.Cursor
	failPut atomic.Bool // Put fails while set
}

func newMemStore() *memStore {
	l := memlog.NewLog()
	return &memStore{log: l, cur: l.Cursor("")}
}

// store is s as the channel takes it.
func (s *memStore) store() channel.Store {
	return channel.Store{Log: failingPuts{s.log, s}, Cursor: s.cur, Close: s.log.Close}
}

var errTimers = errors.New("memStore: put refused")

// failingPuts is a Log whose Puts fail while its store's failPut is set.
type failingPuts struct {
	channel.Log
	s *memStore
}

func (l failingPuts) Put(ctx context.Context, body []byte) error {
	_, err := l.PutSeq(ctx, body)
	return err
}

func (l failingPuts) PutSeq(ctx context.Context, body []byte) (uint64, error) {
	if l.s.failPut.Load() {
		return 0, errTimers
	}
	return l.Log.PutSeq(ctx, body)
}

func (s *memStore) Put(ctx context.Context, body []byte) error { return s.log.Put(ctx, body) }

// Depth is how many records are stored and not acknowledged.
func (s *memStore) Depth() int64 { return s.cur.Depth() }

// live is Depth as an int.
func (s *memStore) live() int { return int(s.cur.Depth()) }

// written is how many records were ever put.
func (s *memStore) written() int { return int(s.log.NextSeq()) }

// reopen makes the store usable again after Close, from the oldest
// unacknowledged record, like a disk queue opened after a restart.
func (s *memStore) reopen() *memStore {
	l := s.log.Reopen()
	return &memStore{log: l, cur: l.Cursor("")}
}

// snapshot is what a crash at this moment leaves; s goes on. A memlog
// loses nothing in a crash: that is what a restart finds.
func (s *memStore) snapshot() *memStore { return s.reopen() }

// errorBackend fails every call, like nsq's errorBackendQueue.
type errorBackend struct{}

var errBackend = errors.New("backend is broken")

func (errorBackend) store() channel.Store {
	return channel.Store{Log: errorLog{}, Cursor: errorCursor{}}
}

type errorLog struct{}

func (errorLog) Put(context.Context, []byte) error                      { return errBackend }
func (errorLog) PutSeq(context.Context, []byte) (uint64, error)         { return 0, errBackend }
func (errorLog) PutBatch(context.Context, [][]byte) (int, error)        { return 0, errBackend }
func (errorLog) NextSeq() uint64                                        { return 0 }
func (errorLog) Floor() uint64                                          { return 0 }
func (errorLog) Acknowledged(uint64) bool                               { return false }
func (errorLog) ReadAt(uint64) (diskqueue.Record, error)                { return diskqueue.Record{}, errBackend }
func (errorLog) Sync(context.Context) error                             { return errBackend }
func (errorLog) MaxRecordBytes() int                                    { return diskqueue.MaxRecordBytesLimit }
func (errorLog) MinRecordBytes() int                                    { return 0 }
func (errorLog) Scan(uint64, uint64) iter.Seq2[diskqueue.Record, error] { return errorRecords }

func errorRecords(yield func(diskqueue.Record, error) bool) { yield(diskqueue.Record{}, errBackend) }

type errorCursor struct{}

func (errorCursor) ReadBatch(ctx context.Context, _ []diskqueue.Record) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}
func (errorCursor) Ack(uint64) error                { return errBackend }
func (errorCursor) Acknowledged(uint64) bool        { return false }
func (errorCursor) Floor() uint64                   { return 0 }
func (errorCursor) Depth() int64                    { return 0 }
func (errorCursor) Passed() int64                   { return 0 }
func (errorCursor) Empty() error                    { return errBackend }
func (errorCursor) Unread([]diskqueue.Record) error { return errBackend }
func (errorCursor) Discarded(uint64) bool           { return false }
func (errorCursor) Unacknowledged(uint64, uint64) iter.Seq2[diskqueue.Record, error] {
	return errorRecords
}

// limitedBackend is a memStore that refuses records outside [minRecord,
// maxRecord] bytes, as a disk queue does, and says so (its Log's
// MinRecordBytes and MaxRecordBytes).
type limitedBackend struct {
	*memStore
	minRecord, maxRecord int
}

func (b limitedBackend) store() channel.Store {
	b.log.SetLimits(b.minRecord, b.maxRecord)
	return b.memStore.store()
}

// notDurableBackend stores every record and says it is not durable yet,
// as spillq's disk log does when a Put's ctx ends during its fsync.
type notDurableBackend struct{ *memStore }

func (b notDurableBackend) store() channel.Store {
	s := b.memStore.store()
	s.Log = notDurableLog{s.Log}
	return s
}

type notDurableLog struct{ channel.Log }

func (l notDurableLog) Put(ctx context.Context, body []byte) error {
	_, err := l.PutSeq(ctx, body)
	return err
}

func (l notDurableLog) PutSeq(ctx context.Context, body []byte) (uint64, error) {
	seq, err := l.Log.PutSeq(ctx, body)
	if err != nil {
		return seq, err
	}
	return seq, fmt.Errorf("test store: %w (%w)", channel.ErrNotDurable, context.DeadlineExceeded)
}

// unnumbered is a memStore whose Log does not number its records, as the
// go-diskqueue adapter's: PutSeq and ReadAt are unsupported.
type unnumbered struct{ *memStore }

func (b unnumbered) store() channel.Store {
	s := b.memStore.store()
	s.Log = unnumberedLog{s.Log}
	return s
}

type unnumberedLog struct{ channel.Log }

func (unnumberedLog) PutSeq(context.Context, []byte) (uint64, error) {
	return 0, fmt.Errorf("test store: PutSeq: %w", errors.ErrUnsupported)
}

func (unnumberedLog) ReadAt(uint64) (diskqueue.Record, error) {
	return diskqueue.Record{}, fmt.Errorf("test store: ReadAt: %w", errors.ErrUnsupported)
}

// failingReads is a memStore whose reads fail while fail is set; with
// alternate, every other failure is a different error.
type failingReads struct {
	*memStore
	fail, alternate atomic.Bool
	tries           atomic.Int64
}

var errBackendOther = errors.New("test backend: another failure")

func (b *failingReads) store() channel.Store {
	s := b.memStore.store()
	s.Cursor = failingCursor{s.Cursor, b}
	return s
}

type failingCursor struct {
	channel.Cursor
	b *failingReads
}

func (c failingCursor) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	if c.b.fail.Load() {
		if c.b.alternate.Load() && c.b.tries.Add(1)%2 == 0 {
			return 0, errBackendOther
		}
		return 0, errBackend
	}
	return c.Cursor.ReadBatch(ctx, dst)
}

// warnCounter counts the records logged at Warn.
type warnCounter struct{ n atomic.Int64 }

func (w *warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnCounter) Handle(context.Context, slog.Record) error    { w.n.Add(1); return nil }
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnCounter) WithGroup(string) slog.Handler                { return w }

// TestBackendReadWarningsAlternating: the pump warned of a failed read
// whenever the error differed from the one before, so two errors that
// alternate warned at every try, ten times a second.
func TestBackendReadWarningsAlternating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &failingReads{memStore: newMemStore()}
		b.fail.Store(true)
		b.alternate.Store(true)
		w := &warnCounter{}
		c := newChannel(t, channel.Options{Backend: b.store(), Logger: slog.New(w)})
		defer c.Close()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		// The first failure, and one change each 10 s: 3 or 4 in 30 s,
		// against about 300 tries.
		if n, tries := w.n.Load(), c.Stats().ReadErrors; n > 4 || tries < 100 {
			t.Fatalf("30 s of reads failing two ways by turns: %d warnings over %d failures, want at most 4", n, tries)
		}
	})
}

// TestBackendReadErrorsShow: a backend whose reads fail (a file cut short
// under a disk queue fails every read after it) left Receive waiting with
// nothing to tell why but a warning logged ten times a second (a user's
// trial). Stats counts the failures and holds the error while they last.
func TestBackendReadErrorsShow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &failingReads{memStore: newMemStore()}
		b.fail.Store(true)
		c := newChannel(t, channel.Options{Backend: b.store()})
		defer c.Close()
		if err := c.Put(context.Background(), []byte("m")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		st := c.Stats()
		if st.ReadErrors < 5 || !errors.Is(st.ReadErr, errBackend) {
			t.Fatalf("after a second of failing reads: ReadErrors %d, ReadErr %v; want about 10 and %v", st.ReadErrors, st.ReadErr, errBackend)
		}
		b.fail.Store(false)
		if m := receive(t, c); string(m.Body) != "m" {
			t.Fatalf("received %q", m.Body)
		}
		if st := c.Stats(); st.ReadErr != nil || st.ReadErrors == 0 {
			t.Fatalf("after a read succeeded: ReadErrors %d, ReadErr %v; want the count kept and no error", st.ReadErrors, st.ReadErr)
		}
	})
}
