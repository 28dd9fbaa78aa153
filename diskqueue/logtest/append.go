package logtest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

func testAppend(t *testing.T, open Opener) {
	t.Run("DenseFromNextSeq", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		first := h.log().NextSeq()
		want := h.putN("dense", 5) // put checks NextSeq moves by one
		for i, r := range want {
			if r.Seq != first+uint64(i) {
				t.Fatalf("record %d got seq %d, want %d", i, r.Seq, first+uint64(i))
			}
		}
		same(t, "records read", h.readAll(h.cursor(), 5), want)
	})

	t.Run("PutSeq", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		before := h.log().NextSeq()
		b := h.body("putseq", 0)
		seq, err := h.log().PutSeq(t.Context(), b)
		if unsupported(t, "PutSeq", err) {
			_, err = h.log().PutSeq(t.Context(), b)
			stillUnsupported(t, "PutSeq", err)
			h.nothingStored(before, "after an unsupported PutSeq")
			return
		}
		if seq != before {
			t.Fatalf("PutSeq returned seq %d, want NextSeq before it, %d", seq, before)
		}
		if got := h.log().NextSeq(); got != seq+1 {
			t.Fatalf("NextSeq after PutSeq = %d, want %d", got, seq+1)
		}
		// Mixed with Put, the seqs stay dense.
		want := []diskqueue.Record{{Seq: seq, Body: b}}
		want = append(want, h.putN("put", 1)...)
		b2 := h.body("putseq", 1)
		seq2, err := h.log().PutSeq(t.Context(), b2)
		if err != nil {
			t.Fatalf("PutSeq: %v", err)
		}
		if seq2 != seq+2 {
			t.Fatalf("PutSeq after a PutSeq and a Put returned seq %d, want %d", seq2, seq+2)
		}
		want = append(want, diskqueue.Record{Seq: seq2, Body: b2})
		same(t, "records read", h.readAll(h.cursor(), 3), want)
	})

	t.Run("PutBatch", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		before := h.log().NextSeq()
		bodies := [][]byte{h.body("batch", 0), h.body("batch", 1), h.body("batch", 2), h.body("batch", 3)}
		n, err := h.log().PutBatch(t.Context(), bodies)
		if unsupported(t, "PutBatch", err) {
			if n != 0 {
				t.Fatalf("unsupported PutBatch says it stored %d records", n)
			}
			n, err = h.log().PutBatch(t.Context(), bodies)
			stillUnsupported(t, "PutBatch", err)
			if n != 0 {
				t.Fatalf("unsupported PutBatch says it stored %d records", n)
			}
			h.nothingStored(before, "after an unsupported PutBatch")
			return
		}
		if n != len(bodies) {
			t.Fatalf("PutBatch of %d stored %d and no error", len(bodies), n)
		}
		if got := h.log().NextSeq(); got != before+uint64(n) {
			t.Fatalf("NextSeq after PutBatch of %d = %d, want %d", n, got, before+uint64(n))
		}
		// Nothing to store stores nothing, and is no error.
		for _, empty := range [][][]byte{nil, {}} {
			n, err := h.log().PutBatch(t.Context(), empty)
			if n != 0 || err != nil {
				t.Fatalf("PutBatch of no bodies = %d, %v; want 0, nil", n, err)
			}
		}
		if got := h.log().NextSeq(); got != before+4 {
			t.Fatalf("NextSeq after PutBatch of no bodies = %d, want %d", got, before+4)
		}
		want := make([]diskqueue.Record, len(bodies))
		for i, b := range bodies {
			want[i] = diskqueue.Record{Seq: before + uint64(i), Body: b}
		}
		want = append(want, h.putN("after", 1)...)
		same(t, "records read", h.read(h.cursor(), 5, 2), want)
	})

	t.Run("BodyNotRetained", func(t *testing.T) {
		// Each method gets a buffer the caller then overwrites, as a
		// producer reusing its buffer does: what is read is what was put.
		h := newHarness(t, open, defaultConfig)
		var want []diskqueue.Record
		buf := h.body("kept", 0)
		want = append(want, diskqueue.Record{Seq: h.put(buf), Body: bytes.Clone(buf)})
		scribble(buf)

		buf = h.body("kept", 1)
		seq, err := h.log().PutSeq(t.Context(), buf)
		if !unsupported(t, "PutSeq", err) {
			want = append(want, diskqueue.Record{Seq: seq, Body: bytes.Clone(buf)})
		}
		scribble(buf)

		bodies := [][]byte{h.body("kept", 2), h.body("kept", 3)}
		seq = h.log().NextSeq()
		n, err := h.log().PutBatch(t.Context(), bodies)
		if !unsupported(t, "PutBatch", err) {
			if n != 2 {
				t.Fatalf("PutBatch of 2 stored %d", n)
			}
			for i, b := range bodies {
				want = append(want, diskqueue.Record{Seq: seq + uint64(i), Body: bytes.Clone(b)})
				scribble(b)
			}
			bodies[0], bodies[1] = nil, nil
		}

		for _, r := range want {
			got, err := h.log().ReadAt(r.Seq)
			if unsupported(t, "ReadAt", err) {
				break
			}
			same(t, "ReadAt after the caller reused its buffer", []diskqueue.Record{got}, []diskqueue.Record{r})
		}
		same(t, "records read after the caller reused its buffers", h.readAll(h.cursor(), len(want)), want)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		// A Put called with its ctx over may store the record or not, but
		// an error (other than ErrNotDurable) must mean it did not.
		h := newHarness(t, open, defaultConfig)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		before := h.log().NextSeq()
		b := h.body("cancelled", 0)
		err := h.log().Put(ctx, b)
		h.storedIff(err, before, b, "Put with a cancelled ctx")

		before = h.log().NextSeq()
		bodies := [][]byte{h.body("cancelled", 1), h.body("cancelled", 2)}
		n, err := h.log().PutBatch(ctx, bodies)
		if errors.Is(err, errors.ErrUnsupported) {
			t.Logf("not checked: PutBatch is unsupported (%v)", err)
			h.nothingStored(before, "after an unsupported PutBatch")
			return
		}
		if n < 0 || n > len(bodies) {
			t.Fatalf("PutBatch of %d with a cancelled ctx says it stored %d", len(bodies), n)
		}
		if err == nil && n != len(bodies) {
			t.Fatalf("PutBatch of %d with a cancelled ctx stored %d and no error", len(bodies), n)
		}
		if got := h.log().NextSeq(); got != before+uint64(n) {
			t.Fatalf("NextSeq after PutBatch said %d stored = %d, want %d", n, got, before+uint64(n))
		}
		want := make([]diskqueue.Record, n)
		for i := range n {
			want[i] = diskqueue.Record{Seq: before + uint64(i), Body: bodies[i]}
		}
		same(t, "records read after PutBatch with a cancelled ctx", h.readAll(h.cursor(), n), want)
		h.nextIs(h.cursor(), "after PutBatch with a cancelled ctx")
	})

	t.Run("Sync", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		want := h.putN("sync", 3)
		err := h.log().Sync(t.Context())
		if unsupported(t, "Sync", err) {
			stillUnsupported(t, "Sync", h.log().Sync(t.Context()))
		}
		same(t, "records read after Sync", h.readAll(h.cursor(), 3), want)
		if err := h.log().Sync(t.Context()); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Sync with nothing new: %v", err)
		}
	})
}

// scribble overwrites b, as a caller reusing its buffer does.
func scribble(b []byte) {
	for i := range b {
		b[i] = 'X'
	}
}

// nothingStored checks that the log holds no record from seq before on:
// NextSeq has not moved, and the next record put is the next one read.
func (h *harness) nothingStored(before uint64, why string) {
	h.t.Helper()
	if got := h.log().NextSeq(); got != before {
		h.t.Fatalf("%s: NextSeq = %d, want %d (nothing stored)", why, got, before)
	}
	h.nextIs(h.cursor(), why)
}

// storedIff checks Put's contract for the error it returned: stored
// (and read next, at seq before) when err is nil or wraps ErrNotDurable,
// not stored otherwise.
func (h *harness) storedIff(err error, before uint64, body []byte, what string) {
	h.t.Helper()
	if err != nil && !errors.Is(err, channel.ErrNotDurable) {
		h.nothingStored(before, what+" returned "+err.Error())
		return
	}
	if got := h.log().NextSeq(); got != before+1 {
		h.t.Fatalf("%s stored a record (error %v), but NextSeq = %d, want %d", what, err, got, before+1)
	}
	got := h.readAll(h.cursor(), 1)
	same(h.t, what+" stored it (error "+errString(err)+")", got, []diskqueue.Record{{Seq: before, Body: body}})
	h.ackAll(h.cursor(), got)
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func testLimits(t *testing.T, open Opener) {
	cfg := Config{MaxRecordBytes: 64, MinRecordBytes: 4}
	limits := func(t *testing.T) (*harness, int, int) {
		h := newHarness(t, open, cfg)
		maxB, minB := h.log().MaxRecordBytes(), h.log().MinRecordBytes()
		if maxB != cfg.MaxRecordBytes || minB != cfg.MinRecordBytes {
			t.Logf("the store did not take Config's limits [%d, %d]: checking its own, [%d, %d]", cfg.MinRecordBytes, cfg.MaxRecordBytes, minB, maxB)
		}
		if minB < 0 || minB > maxB {
			t.Fatalf("MinRecordBytes %d, MaxRecordBytes %d: want 0 <= min <= max", minB, maxB)
		}
		return h, maxB, minB
	}

	t.Run("TooLarge", func(t *testing.T) {
		h, maxB, _ := limits(t)
		if maxB > 64<<20 {
			t.Logf("not checked: MaxRecordBytes %d is too large for a test to put a body past it", maxB)
			return
		}
		h.refused(make([]byte, maxB+1), diskqueue.ErrRecordTooLarge)
		at := bytes.Repeat([]byte{'m'}, maxB)
		want := []diskqueue.Record{{Seq: h.put(at), Body: at}}
		same(t, "a body of MaxRecordBytes", h.readAll(h.cursor(), 1), want)
	})

	t.Run("TooSmall", func(t *testing.T) {
		h, _, minB := limits(t)
		if minB == 0 {
			t.Log("not checked: MinRecordBytes is 0, every body is long enough; checking an empty body is stored")
			want := []diskqueue.Record{{Seq: h.put(nil), Body: nil}}
			same(t, "an empty body", h.readAll(h.cursor(), 1), want)
			return
		}
		h.refused(make([]byte, minB-1), diskqueue.ErrRecordTooSmall)
		at := bytes.Repeat([]byte{'m'}, minB)
		want := []diskqueue.Record{{Seq: h.put(at), Body: at}}
		same(t, "a body of MinRecordBytes", h.readAll(h.cursor(), 1), want)
	})
}

// refused checks that every way of appending bad refuses it with want
// and stores nothing, and that PutBatch stores the bodies before it.
func (h *harness) refused(bad []byte, want error) {
	h.t.Helper()
	t := h.t
	before := h.log().NextSeq()
	err := h.log().Put(t.Context(), bad)
	if !errors.Is(err, want) || errors.Is(err, channel.ErrNotDurable) {
		t.Fatalf("Put of %d bytes = %v, want an error wrapping %v", len(bad), err, want)
	}
	h.nothingStored(before, "after Put refused a body")

	before = h.log().NextSeq()
	if _, err := h.log().PutSeq(t.Context(), bad); !errors.Is(err, want) && !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("PutSeq of %d bytes = %v, want an error wrapping %v", len(bad), err, want)
	}
	h.nothingStored(before, "after PutSeq refused a body")

	// PutBatch stores a prefix of the bodies before the bad one (all,
	// some or none: diskqueue checks every body first) and says how long.
	before = h.log().NextSeq()
	good := [][]byte{h.body("ok", 0), h.body("ok", 1)}
	n, err := h.log().PutBatch(t.Context(), [][]byte{good[0], good[1], bad, h.body("ok", 2)})
	if errors.Is(err, errors.ErrUnsupported) {
		t.Logf("not checked: PutBatch is unsupported (%v)", err)
		h.nothingStored(before, "after an unsupported PutBatch")
		return
	}
	if n < 0 || n > 2 || !errors.Is(err, want) {
		t.Fatalf("PutBatch with a bad third body = %d, %v; want 0 to 2, an error wrapping %v", n, err, want)
	}
	if got := h.log().NextSeq(); got != before+uint64(n) {
		t.Fatalf("NextSeq after PutBatch stored %d = %d, want %d", n, got, before+uint64(n))
	}
	stored := []diskqueue.Record{{Seq: before, Body: good[0]}, {Seq: before + 1, Body: good[1]}}[:n]
	got := h.readAll(h.cursor(), n)
	same(t, "PutBatch's prefix before the bad body", got, stored)
	h.ackAll(h.cursor(), got)
	h.nextIs(h.cursor(), "after PutBatch's bad body")

	before = h.log().NextSeq()
	n, err = h.log().PutBatch(t.Context(), [][]byte{bad, good[0]})
	if n != 0 || !errors.Is(err, want) {
		t.Fatalf("PutBatch with a bad first body = %d, %v; want 0, an error wrapping %v", n, err, want)
	}
	h.nothingStored(before, "after PutBatch refused its first body")
}
