package channel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillq/spillq/channel"
)

// memBackend is an in-memory Backend with the real Read/Ack contract:
// records stay until acknowledged, and reopen() makes the unacknowledged
// ones readable again, as a restart would.
type memBackend struct {
	mu      sync.Mutex
	records [][]byte
	acked   map[uint64]bool
	next    uint64 // next record Read hands out
	closed  bool
	wake    chan struct{}
}

func newMemBackend() *memBackend {
	return &memBackend{acked: map[uint64]bool{}, wake: make(chan struct{})}
}

func (b *memBackend) Put(_ context.Context, body []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return channel.ErrClosed
	}
	b.records = append(b.records, append([]byte(nil), body...))
	close(b.wake)
	b.wake = make(chan struct{})
	return nil
}

func (b *memBackend) Read(ctx context.Context) (uint64, []byte, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return 0, nil, channel.ErrClosed
		}
		for b.next < uint64(len(b.records)) && b.acked[b.next] {
			b.next++
		}
		if b.next < uint64(len(b.records)) {
			seq := b.next
			b.next++
			body := b.records[seq]
			b.mu.Unlock()
			return seq, body, nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
}

func (b *memBackend) Ack(seq uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq >= uint64(len(b.records)) || b.acked[seq] {
		return errors.New("memBackend: ack of unknown or acknowledged record")
	}
	b.acked[seq] = true
	return nil
}

// ScanBacklog makes memBackend a channel.BacklogScanner.
func (b *memBackend) ScanBacklog() (uint64, func(yield func(uint64, []byte, error) bool)) {
	b.mu.Lock()
	from, end := b.next, uint64(len(b.records))
	b.mu.Unlock()
	return end, func(yield func(uint64, []byte, error) bool) {
		for seq := from; seq < end; seq++ {
			b.mu.Lock()
			acked, body := b.acked[seq], b.records[seq]
			b.mu.Unlock()
			if !acked && !yield(seq, body, nil) {
				return
			}
		}
	}
}

func (b *memBackend) Depth() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.records) - len(b.acked))
}

func (b *memBackend) Empty() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.records {
		b.acked[uint64(i)] = true
	}
	return nil
}

func (b *memBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// reopen makes the backend usable again after Close, from the oldest
// unacknowledged record, like a disk queue opened after a restart.
func (b *memBackend) reopen() *memBackend {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &memBackend{records: b.records, acked: b.acked, wake: make(chan struct{})}
}

// errorBackend fails every call, like nsq's errorBackendQueue.
type errorBackend struct{}

var errBackend = errors.New("backend is broken")

func (errorBackend) Put(context.Context, []byte) error { return errBackend }
func (errorBackend) Read(ctx context.Context) (uint64, []byte, error) {
	<-ctx.Done()
	return 0, nil, ctx.Err()
}
func (errorBackend) Ack(uint64) error { return errBackend }
func (errorBackend) Depth() int64     { return 0 }
func (errorBackend) Empty() error     { return errBackend }
func (errorBackend) Close() error     { return nil }

// limitedBackend is a memBackend that refuses records outside [minRecord,
// maxRecord] bytes, as a disk queue does, and says so (a
// channel.RecordLimiter).
type limitedBackend struct {
	*memBackend
	minRecord, maxRecord int
}

var errRecordSize = errors.New("limitedBackend: record out of range")

func (b limitedBackend) Put(ctx context.Context, body []byte) error {
	if len(body) < b.minRecord || len(body) > b.maxRecord {
		return errRecordSize
	}
	return b.memBackend.Put(ctx, body)
}

func (b limitedBackend) MaxRecordBytes() int { return b.maxRecord }
func (b limitedBackend) MinRecordBytes() int { return b.minRecord }

// notDurableBackend stores every record and says it is not durable yet,
// as spillq's disk log does when a Put's ctx ends during its fsync.
type notDurableBackend struct{ *memBackend }

func (b notDurableBackend) Put(ctx context.Context, body []byte) error {
	if err := b.memBackend.Put(ctx, body); err != nil {
		return err
	}
	return fmt.Errorf("test backend: %w (%w)", channel.ErrNotDurable, context.DeadlineExceeded)
}

// failingReads is a memBackend whose reads fail while fail is set; with
// alternate, every other failure is a different error.
type failingReads struct {
	*memBackend
	fail, alternate atomic.Bool
	tries           atomic.Int64
}

var errBackendOther = errors.New("test backend: another failure")

func (b *failingReads) Read(ctx context.Context) (uint64, []byte, error) {
	if b.fail.Load() {
		if b.alternate.Load() && b.tries.Add(1)%2 == 0 {
			return 0, nil, errBackendOther
		}
		return 0, nil, errBackend
	}
	return b.memBackend.Read(ctx)
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
		b := &failingReads{memBackend: newMemBackend()}
		b.fail.Store(true)
		b.alternate.Store(true)
		w := &warnCounter{}
		c := newChannel(t, channel.Options{Backend: b, Logger: slog.New(w)})
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
		b := &failingReads{memBackend: newMemBackend()}
		b.fail.Store(true)
		c := newChannel(t, channel.Options{Backend: b})
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
