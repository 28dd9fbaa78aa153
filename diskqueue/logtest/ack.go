package logtest

import (
	"slices"
	"strconv"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

func testAck(t *testing.T, open Opener) {
	t.Run("AnyOrder", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("ack", 6)
		h.readAll(h.cursor(), 6)
		acked := map[uint64]bool{}
		for _, i := range []int{3, 0, 5, 1, 4, 2} {
			if err := h.cursor().Ack(recs[i].Seq); err != nil {
				t.Fatalf("Ack(%d): %v", recs[i].Seq, err)
			}
			acked[recs[i].Seq] = true
			h.checkAcks(recs, acked, "after acking seq "+seqString(recs[i].Seq))
		}
		h.readNone(h.cursor(), "after acking every record")
	})

	t.Run("Floor", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		if f, next := h.cursor().Floor(), h.log().NextSeq(); f != next {
			t.Fatalf("Floor of an empty log = %d, want NextSeq %d", f, next)
		}
		recs := h.putN("floor", 5)
		s0 := recs[0].Seq
		h.readAll(h.cursor(), 5)
		// Floor moves past a prefix of acks only: 2 and 3 acked out of
		// order hold it at 0, then 0 and 1 let it past 3.
		steps := []struct {
			ack   int
			floor uint64
		}{{2, s0}, {3, s0}, {0, s0 + 1}, {1, s0 + 4}, {4, s0 + 5}}
		for _, st := range steps {
			if err := h.cursor().Ack(recs[st.ack].Seq); err != nil {
				t.Fatalf("Ack(%d): %v", recs[st.ack].Seq, err)
			}
			if got := h.cursor().Floor(); got != st.floor {
				t.Fatalf("cursor Floor after acking seq %d = %d, want %d", recs[st.ack].Seq, got, st.floor)
			}
			if got := h.log().Floor(); got != st.floor {
				t.Fatalf("log Floor after acking seq %d = %d, want %d (one cursor)", recs[st.ack].Seq, got, st.floor)
			}
		}
	})

	t.Run("Depth", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		checkDepth(t, h.cursor(), 0, "of an empty log")
		h.putN("depth", 3)
		checkDepth(t, h.cursor(), 3, "after 3 Puts")
		got := h.read(h.cursor(), 2, 2)
		checkDepth(t, h.cursor(), 3, "with 2 of 3 in flight")
		h.ackAll(h.cursor(), got[1:])
		checkDepth(t, h.cursor(), 2, "after acking 1 of 3")
		h.ackAll(h.cursor(), got[:1])
		h.ackAll(h.cursor(), h.readAll(h.cursor(), 1))
		checkDepth(t, h.cursor(), 0, "after acking all 3")
	})

	t.Run("AckTwiceOrUnwritten", func(t *testing.T) {
		// Neither is an ack the reader owes; whatever the error, neither
		// may change what the cursor holds.
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("twice", 2)
		got := h.read(h.cursor(), 1, 1)
		h.ackAll(h.cursor(), got)
		_ = h.cursor().Ack(recs[0].Seq)
		checkDepth(t, h.cursor(), 1, "after acking a record twice")
		if !h.cursor().Acknowledged(recs[0].Seq) {
			t.Fatalf("Acknowledged(%d) false after acking it twice", recs[0].Seq)
		}

		next := h.log().NextSeq()
		if err := h.cursor().Ack(next); err == nil {
			t.Fatalf("Ack(%d) of a seq never written: no error", next)
		}
		if h.cursor().Acknowledged(next) || h.log().Acknowledged(next) {
			t.Fatalf("Acknowledged(%d) true for a seq never written, after an Ack of it", next)
		}
		checkDepth(t, h.cursor(), 1, "after acking a seq never written")
		if f := h.cursor().Floor(); f != recs[1].Seq {
			t.Fatalf("Floor after acking a seq never written = %d, want %d", f, recs[1].Seq)
		}
		// The record that then gets that seq is delivered all the same.
		same(t, "the record not yet read", h.readAll(h.cursor(), 1), recs[1:])
		h.nextIs(h.cursor(), "after an Ack of its seq before it was written")
	})

	t.Run("AcknowledgedUnwritten", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		h.putN("unwritten", 1)
		for _, seq := range []uint64{h.log().NextSeq(), h.log().NextSeq() + 100} {
			if h.log().Acknowledged(seq) || h.cursor().Acknowledged(seq) {
				t.Fatalf("Acknowledged(%d) true for a seq not yet written", seq)
			}
		}
	})

	t.Run("Empty", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("empty", 5)
		inFlight := h.read(h.cursor(), 2, 2)
		for _, r := range inFlight {
			if h.cursor().Discarded(r.Seq) {
				t.Fatalf("Discarded(%d) true for a record in flight before Empty", r.Seq)
			}
		}
		err := h.cursor().Empty()
		if unsupported(t, "Empty", err) {
			stillUnsupported(t, "Empty", h.cursor().Empty())
			checkDepth(t, h.cursor(), 5, "after an unsupported Empty")
			same(t, "records read after an unsupported Empty", h.readAll(h.cursor(), 3), recs[2:])
			return
		}
		checkDepth(t, h.cursor(), 0, "after Empty")
		next := h.log().NextSeq()
		if f := h.cursor().Floor(); f != next {
			t.Fatalf("cursor Floor after Empty = %d, want NextSeq %d", f, next)
		}
		if f := h.log().Floor(); f != next {
			t.Fatalf("log Floor after Empty = %d, want NextSeq %d", f, next)
		}
		for _, r := range recs {
			if !h.cursor().Acknowledged(r.Seq) || !h.log().Acknowledged(r.Seq) {
				t.Fatalf("Acknowledged(%d) false after Empty", r.Seq)
			}
		}
		for _, r := range inFlight {
			if !h.cursor().Discarded(r.Seq) {
				t.Fatalf("Discarded(%d) false for a record in flight when Empty ran", r.Seq)
			}
		}
		// The reader's late acks change nothing; the log goes on from
		// where it was, and its next record is not discarded.
		for _, r := range inFlight {
			_ = h.cursor().Ack(r.Seq)
		}
		checkDepth(t, h.cursor(), 0, "after acking records Empty discarded")
		h.readNone(h.cursor(), "after Empty")
		b := h.body("after", 0)
		seq := h.put(b)
		if seq != next {
			t.Fatalf("Put after Empty got seq %d, want %d: Empty does not reuse seqs", seq, next)
		}
		got := h.readAll(h.cursor(), 1)
		same(t, "record put after Empty", got, []diskqueue.Record{{Seq: seq, Body: b}})
		if h.cursor().Discarded(seq) {
			t.Fatalf("Discarded(%d) true for a record put after Empty", seq)
		}
		stillEmpty, err := collect(h.cursor().Unacknowledged(0, seq))
		if err == nil && len(stillEmpty) != 0 {
			t.Fatalf("Unacknowledged before the record put after Empty yielded %v", seqsOf(stillEmpty))
		}
	})

	t.Run("Unacknowledged", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		recs := h.putN("unacked", 6)
		s0, end := recs[0].Seq, h.log().NextSeq()
		if _, err := collect(h.cursor().Unacknowledged(s0, end)); unsupported(t, "Unacknowledged", err) {
			got, err := collect(h.cursor().Unacknowledged(s0, s0+2))
			stillUnsupported(t, "Unacknowledged", err)
			if len(got) != 0 {
				t.Fatalf("unsupported Unacknowledged yielded %d records", len(got))
			}
			return
		}
		h.read(h.cursor(), 4, 4)
		h.ackAll(h.cursor(), pick(recs, 1, 3))
		// 0 and 2 in flight, 4 and 5 not read: all not acknowledged.
		for _, c := range []struct {
			name     string
			from, to uint64
			want     []diskqueue.Record
		}{
			{"all", s0, end, pick(recs, 0, 2, 4, 5)},
			{"from an acked one", s0 + 1, s0 + 5, pick(recs, 2, 4)},
			{"acked only", s0 + 3, s0 + 4, nil},
			{"empty", s0 + 2, s0 + 2, nil},
			{"reversed", s0 + 4, s0 + 1, nil},
			{"past the end", s0 + 5, end + 100, pick(recs, 5)},
			{"all of it", 0, ^uint64(0), pick(recs, 0, 2, 4, 5)},
		} {
			got, err := collect(h.cursor().Unacknowledged(c.from, c.to))
			if err != nil {
				t.Fatalf("Unacknowledged(%d, %d) (%s): %v", c.from, c.to, c.name, err)
			}
			same(t, "Unacknowledged "+c.name, got, c.want)
		}
		var got []diskqueue.Record
		for r, err := range h.cursor().Unacknowledged(s0, end) {
			if err != nil {
				t.Fatalf("Unacknowledged: %v", err)
			}
			if got = append(got, r); len(got) == 1 {
				break
			}
		}
		same(t, "Unacknowledged stopped after 1", got, recs[:1])
		h.ackAll(h.cursor(), pick(recs, 0, 2))
		h.ackAll(h.cursor(), h.readAll(h.cursor(), 2))
		if got, err := collect(h.cursor().Unacknowledged(s0, end)); err != nil || len(got) != 0 {
			t.Fatalf("Unacknowledged after acking all = %v, %v; want none", seqsOf(got), err)
		}
	})
}

// checkAcks checks the ack state of recs on the harness's one cursor and
// on the log: Acknowledged as acked says, Depth the rest, Floor the
// oldest not acked.
func (h *harness) checkAcks(recs []diskqueue.Record, acked map[uint64]bool, when string) {
	h.t.Helper()
	floor := h.log().NextSeq()
	for _, r := range recs {
		want := acked[r.Seq]
		if got := h.cursor().Acknowledged(r.Seq); got != want {
			h.t.Fatalf("cursor Acknowledged(%d) %s = %v, want %v", r.Seq, when, got, want)
		}
		if got := h.log().Acknowledged(r.Seq); got != want {
			h.t.Fatalf("log Acknowledged(%d) %s = %v, want %v (one cursor)", r.Seq, when, got, want)
		}
		if !want {
			floor = min(floor, r.Seq)
		}
	}
	checkDepth(h.t, h.cursor(), int64(len(recs)-len(acked)), when)
	if got := h.cursor().Floor(); got != floor {
		h.t.Fatalf("cursor Floor %s = %d, want %d", when, got, floor)
	}
	if got := h.log().Floor(); got != floor {
		h.t.Fatalf("log Floor %s = %d, want %d (one cursor)", when, got, floor)
	}
}

// cursorHolds checks what c has acknowledged of recs.
func cursorHolds(t *testing.T, c channel.Cursor, name string, recs []diskqueue.Record, acked []uint64) {
	t.Helper()
	for _, r := range recs {
		want := slices.Contains(acked, r.Seq)
		if got := c.Acknowledged(r.Seq); got != want {
			t.Fatalf("cursor %s: Acknowledged(%d) = %v, want %v", name, r.Seq, got, want)
		}
	}
	checkDepth(t, c, int64(len(recs)-len(acked)), "of cursor "+name)
}

func seqString(seq uint64) string { return strconv.FormatUint(seq, 10) }
