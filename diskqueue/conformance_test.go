package diskqueue_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/diskqueue/logtest"
)

// TestConformance runs the seam's conformance suite against the log and
// its cursors, with segments small enough that the suite's records span
// several, so that acknowledged ones are deleted under it.
func TestConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
		opts := diskqueue.Options{
			MaxSegmentBytes: 1024,
			MaxRecordBytes:  cfg.MaxRecordBytes,
			MinRecordBytes:  cfg.MinRecordBytes,
		}
		return openConformance(t, t.TempDir(), opts)
	})
}

func openConformance(t *testing.T, dir string, opts diskqueue.Options) logtest.Store {
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		t.Fatalf("OpenLog: %v", err)
	}
	cursor := func(t *testing.T, name string) channel.Cursor {
		c, err := l.Cursor(name, diskqueue.FromNext())
		if err != nil {
			t.Fatalf("Cursor(%q): %v", name, err)
		}
		return newUnreadShim(c)
	}
	return logtest.Store{
		Store:     channel.Store{Log: l, Cursor: cursor(t, "main"), Close: l.Close},
		NewCursor: cursor,
		Reopen:    func(t *testing.T) logtest.Store { return openConformance(t, dir, opts) },
	}
}

// unreadShim — TEST-ONLY SHIM, DELETE ON MERGE: it adds to a
// *diskqueue.Cursor the seam's Floor, Unread and Discarded, which the
// cursor gets of its own in the change moving channel onto the seam; then
// openConformance hands out the *diskqueue.Cursor itself. Records given
// back are kept here, in seq order, handed out first, and wake a
// ReadBatch waiting meanwhile; Discarded is the topic's cursorSource's.
type unreadShim struct {
	*diskqueue.Cursor
	mu   sync.Mutex
	back []diskqueue.Record
	wake chan struct{} // closed and replaced by Unread
}

func newUnreadShim(c *diskqueue.Cursor) *unreadShim {
	return &unreadShim{Cursor: c, wake: make(chan struct{})}
}

func (s *unreadShim) Floor() uint64 { return s.Stats().ReadSeq }

func (s *unreadShim) Discarded(seq uint64) bool {
	st := s.Stats()
	return seq < st.ReadSeq || st.Dropped > 0 && s.Acknowledged(seq)
}

func (s *unreadShim) Unread(recs []diskqueue.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		i, _ := slices.BinarySearchFunc(s.back, r.Seq, func(b diskqueue.Record, seq uint64) int { return cmp.Compare(b.Seq, seq) })
		s.back = slices.Insert(s.back, i, r)
	}
	close(s.wake)
	s.wake = make(chan struct{})
	return nil
}

func (s *unreadShim) Empty() error {
	s.mu.Lock()
	s.back = nil
	s.mu.Unlock()
	return s.Cursor.Empty()
}

func (s *unreadShim) ReadBatch(ctx context.Context, dst []diskqueue.Record) (int, error) {
	for {
		s.mu.Lock()
		if len(s.back) > 0 {
			n := copy(dst, s.back)
			s.back = s.back[n:]
			s.mu.Unlock()
			return n, nil
		}
		wake := s.wake
		s.mu.Unlock()
		rctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-wake:
				cancel()
			case <-stop:
			}
		}()
		n, err := s.Cursor.ReadBatch(rctx, dst)
		close(stop)
		cancel()
		if n > 0 || ctx.Err() != nil || !errors.Is(err, context.Canceled) {
			return n, err
		}
		// Woken by Unread: hand out what was given back.
	}
}
