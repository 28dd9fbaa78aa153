package logtest

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

func testRead(t *testing.T, open Opener) {
	t.Run("ReadAt", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("readat", 4)
		if _, err := h.log().ReadAt(recs[0].Seq); unsupported(t, "ReadAt", err) {
			for _, seq := range []uint64{recs[1].Seq, h.log().NextSeq()} {
				_, err := h.log().ReadAt(seq)
				stillUnsupported(t, "ReadAt", err)
			}
			same(t, "records read after an unsupported ReadAt", h.readAll(h.cursor(), 4), recs)
			return
		}
		// Not acknowledged: found, read or not.
		h.readAllAt("ReadAt of a record not read", recs)
		got := h.read(h.cursor(), 2, 2)
		h.readAllAt("ReadAt of a record in flight", recs)

		// Never written.
		for _, seq := range []uint64{h.log().NextSeq(), h.log().NextSeq() + 1000} {
			if _, err := h.log().ReadAt(seq); !errors.Is(err, diskqueue.ErrNotFound) {
				t.Fatalf("ReadAt(%d), not written yet = %v, want ErrNotFound", seq, err)
			}
		}

		// Acknowledged: still there (retained) or ErrNotFound, never
		// something else.
		h.ackAll(h.cursor(), got)
		h.ackAll(h.cursor(), h.read(h.cursor(), 2, 2))
		for _, r := range recs {
			got, err := h.log().ReadAt(r.Seq)
			if errors.Is(err, diskqueue.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("ReadAt(%d), acknowledged = %v, want the record or ErrNotFound", r.Seq, err)
			}
			same(t, "ReadAt of a record acknowledged and retained", []diskqueue.Record{got}, []diskqueue.Record{r})
		}
	})

	t.Run("Scan", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("scan", 6)
		s0, end := recs[0].Seq, h.log().NextSeq()
		if _, err := collect(h.log().Scan(s0, end)); unsupported(t, "Scan", err) {
			got, err := collect(h.log().Scan(s0+1, s0+3))
			stillUnsupported(t, "Scan", err)
			if len(got) != 0 {
				t.Fatalf("unsupported Scan yielded %d records", len(got))
			}
			same(t, "records read after an unsupported Scan", h.readAll(h.cursor(), 6), recs)
			return
		}
		for _, c := range []struct {
			name     string
			from, to uint64
			want     []diskqueue.Record
		}{
			{"all", s0, end, recs},
			{"middle", s0 + 2, s0 + 4, recs[2:4]},
			{"one", s0 + 5, s0 + 6, recs[5:]},
			{"empty", s0 + 3, s0 + 3, nil},
			{"reversed", s0 + 4, s0 + 2, nil},
			{"past the end", s0 + 4, end + 100, recs[4:]},
			{"from before the first", 0, s0 + 2, recs[:2]},
			{"all of it", 0, ^uint64(0), recs},
			{"not written yet", end, end + 10, nil},
		} {
			got, err := collect(h.log().Scan(c.from, c.to))
			if err != nil {
				t.Fatalf("Scan(%d, %d) (%s): %v", c.from, c.to, c.name, err)
			}
			same(t, "Scan "+c.name, got, c.want)
		}

		// Breaking out of the loop stops the iterator (the runtime panics
		// if it yields again), and leaves the log as it was.
		var got []diskqueue.Record
		for r, err := range h.log().Scan(s0, end) {
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			got = append(got, r)
			if len(got) == 2 {
				break
			}
		}
		same(t, "Scan stopped after 2", got, recs[:2])
		same(t, "records read after a Scan", h.readAll(h.cursor(), 6), recs)

		// Acknowledged records are yielded while retained, not after; what
		// is yielded is still in order and intact.
		h.ackAll(h.cursor(), recs[:3])
		got, err := collect(h.log().Scan(s0, end))
		if err != nil {
			t.Fatalf("Scan after acks: %v", err)
		}
		if len(got) < 3 {
			t.Fatalf("Scan after acking 3 of 6 yielded %v, want at least the 3 not acknowledged", seqsOf(got))
		}
		same(t, "Scan after acks, the records not acknowledged", got[len(got)-3:], recs[3:])
		same(t, "Scan after acks, the records retained", got, recs[6-len(got):])
	})

	t.Run("ReadBatchOrder", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("order", 10)
		// A batch takes the records ready, in order, up to its length, and
		// hands out nothing twice; the last is longer than what is left.
		ctx, cancel := context.WithTimeout(t.Context(), guard)
		defer cancel()
		got := h.read(h.cursor(), 1, 1)
		dst := make([]diskqueue.Record, 4)
		for len(got) < len(recs) {
			k, err := h.cursor().ReadBatch(ctx, dst)
			if err != nil {
				t.Fatalf("ReadBatch after %d of %d records: %v", len(got), len(recs), err)
			}
			if k < 1 || k > len(dst) {
				t.Fatalf("ReadBatch into %d slots with records ready returned %d", len(dst), k)
			}
			got = append(got, dst[:k]...)
		}
		same(t, "records read in batches", got, recs)
		h.readNone(h.cursor(), "after reading every record")
		if p := h.cursor().Passed(); p != 0 {
			t.Fatalf("Passed = %d after reading an undamaged log, want 0", p)
		}
	})

	t.Run("ReadBatchWaitsForPut", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		h.readNone(h.cursor(), "on an empty log")
		res := h.readAsync(t.Context(), h.cursor())
		select {
		case r := <-res:
			t.Fatalf("ReadBatch on an empty log returned %d records, %v, before any Put", r.n, r.err)
		default:
		}
		b := h.body("waited", 0)
		seq := h.put(b)
		r := h.await(res, "ReadBatch waiting when a record was put")
		if r.err != nil || r.n != 1 {
			t.Fatalf("ReadBatch waiting for a Put = %d, %v; want 1 record", r.n, r.err)
		}
		same(t, "the record ReadBatch waited for", r.recs[:1], []diskqueue.Record{{Seq: seq, Body: b}})
	})

	t.Run("ReadBatchCancel", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		ctx, cancel := context.WithCancel(t.Context())
		res := h.readAsync(ctx, h.cursor())
		cancel()
		r := h.await(res, "ReadBatch whose ctx was cancelled")
		if r.n != 0 || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("ReadBatch whose ctx was cancelled = %d, %v; want 0, context.Canceled", r.n, r.err)
		}
		// The cancelled read took nothing with it.
		h.nextIs(h.cursor(), "after a cancelled ReadBatch")
	})

	t.Run("ReadBatchAtClose", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		if h.s.Close == nil {
			t.Log("not checked: the store sets no Close")
			return
		}
		res := h.readAsync(t.Context(), h.cursor())
		h.close()
		r := h.await(res, "ReadBatch waiting when the store closed")
		if r.n != 0 || !errors.Is(r.err, channel.ErrClosed) {
			t.Fatalf("ReadBatch waiting when the store closed = %d, %v; want 0, ErrClosed", r.n, r.err)
		}
	})
}

// readAllAt checks that ReadAt finds each of recs.
func (h *harness) readAllAt(what string, recs []diskqueue.Record) {
	h.t.Helper()
	for _, r := range recs {
		got, err := h.log().ReadAt(r.Seq)
		if err != nil {
			h.t.Fatalf("%s: ReadAt(%d): %v", what, r.Seq, err)
		}
		if got.Seq != r.Seq || !bytes.Equal(got.Body, r.Body) {
			h.t.Fatalf("%s: ReadAt(%d) = seq %d %q, want %q", what, r.Seq, got.Seq, got.Body, r.Body)
		}
	}
}

type readResult struct {
	n    int
	recs []diskqueue.Record
	err  error
}

// readAsync starts a ReadBatch of up to 4 records on its own goroutine.
func (h *harness) readAsync(ctx context.Context, c channel.Cursor) <-chan readResult {
	res := make(chan readResult, 1)
	go func() {
		dst := make([]diskqueue.Record, 4)
		n, err := c.ReadBatch(ctx, dst)
		res <- readResult{n, dst[:max(0, min(n, len(dst)))], err}
	}()
	// Give the reader the chance to start waiting. Its result must be the
	// same whether it has or not, so this stands in for no condition; it
	// only makes the case that tests the wake-up the likely one.
	for range 100 {
		runtime.Gosched()
	}
	return res
}

// await waits for res, failing after guard with what it waited for.
func (h *harness) await(res <-chan readResult, what string) readResult {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	select {
	case r := <-res:
		return r
	case <-ctx.Done():
		h.t.Fatalf("%s: did not return in %v", what, guard)
		return readResult{}
	}
}
