package logtest

import (
	"errors"
	"testing"

	"github.com/spillq/spillq/diskqueue"
)

func testCursor(t *testing.T, open Opener) {
	t.Run("Unread", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		c := h.cursor()
		recs := h.putN("unread", 6)
		got := h.read(c, 4, 4)
		err := c.Unread(pick(got, 3))
		if unsupported(t, "Unread", err) {
			stillUnsupported(t, "Unread", c.Unread(pick(got, 1)))
			checkDepth(t, c, 6, "after an unsupported Unread")
			same(t, "records read after an unsupported Unread", h.readAll(c, 2), recs[4:])
			h.readNone(c, "after an unsupported Unread")
			return
		}
		// Given back in two calls, the second out of order and older than
		// the first: handed out again first, in seq order.
		if err := c.Unread(pick(got, 2, 0)); err != nil {
			t.Fatalf("Unread: %v", err)
		}
		checkDepth(t, c, 6, "with records given back")
		for _, r := range pick(got, 0, 2, 3) {
			if c.Acknowledged(r.Seq) || c.Discarded(r.Seq) {
				t.Fatalf("record %d given back: Acknowledged %v, Discarded %v; want neither", r.Seq, c.Acknowledged(r.Seq), c.Discarded(r.Seq))
			}
		}
		same(t, "records read after Unread", h.readAll(c, 5), pick(recs, 0, 2, 3, 4, 5))
		h.readNone(c, "after reading again what was given back")
		h.ackAll(c, recs)
		checkDepth(t, c, 0, "after acking every record given back and read again")
	})

	t.Run("UnreadWakesReader", func(t *testing.T) {
		// A record given back is the next record for a ReadBatch already
		// waiting, as one put would be.
		h := newHarness(t, open, defaultConfig)
		c := h.cursor()
		recs := h.putN("wake", 1)
		h.readAll(c, 1)
		res := h.readAsync(t.Context(), c)
		if err := c.Unread(recs); unsupported(t, "Unread", err) {
			b := h.body("marker", 0)
			seq := h.put(b)
			r := h.await(res, "ReadBatch waiting when a record was put")
			if r.err != nil || r.n != 1 {
				t.Fatalf("ReadBatch waiting when a record was put = %d, %v; want 1 record", r.n, r.err)
			}
			same(t, "the next record after an unsupported Unread", r.recs, []diskqueue.Record{{Seq: seq, Body: b}})
			return
		}
		r := h.await(res, "ReadBatch waiting when a record was given back")
		if r.err != nil || r.n != 1 {
			t.Fatalf("ReadBatch waiting when a record was given back = %d, %v; want 1 record", r.n, r.err)
		}
		same(t, "the record given back to a waiting ReadBatch", r.recs, recs)
	})

	t.Run("UnreadThenEmpty", func(t *testing.T) {
		// Empty acknowledges what was given back too: it is not handed
		// out again.
		h := newHarness(t, open, defaultConfig)
		c := h.cursor()
		h.putN("gone", 3)
		got := h.readAll(c, 3)
		if err := c.Unread(got); unsupported(t, "Unread", err) {
			return
		}
		if err := c.Empty(); unsupported(t, "Empty", err) {
			return
		}
		for _, r := range got {
			if !c.Discarded(r.Seq) {
				t.Fatalf("Discarded(%d) false for a record given back when Empty ran", r.Seq)
			}
		}
		checkDepth(t, c, 0, "after Empty")
		h.nextIs(c, "after Empty of records given back")
	})

	t.Run("TwoCursors", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		c1, c2 := h.cursor(), h.newCursor("second")
		if c2 == nil {
			return
		}
		recs := h.putN("two", 4)
		s0, next := recs[0].Seq, h.log().NextSeq()
		same(t, "cursor 1 reads every record", h.readAll(c1, 4), recs)
		h.ackAll(c1, recs)
		cursorHolds(t, c1, "1", recs, seqsOf(recs))
		cursorHolds(t, c2, "2", recs, nil)
		for _, r := range recs {
			if h.log().Acknowledged(r.Seq) {
				t.Fatalf("log Acknowledged(%d) true while cursor 2 has not acknowledged it", r.Seq)
			}
		}
		if c1.Floor() != next || c2.Floor() != s0 || h.log().Floor() != s0 {
			t.Fatalf("Floor: cursor 1 %d, cursor 2 %d, log %d; want %d, %d, %d", c1.Floor(), c2.Floor(), h.log().Floor(), next, s0, s0)
		}

		same(t, "cursor 2 reads every record too", h.readAll(c2, 4), recs)
		h.ackAll(c2, pick(recs, 2))
		if !h.log().Acknowledged(recs[2].Seq) || h.log().Acknowledged(recs[0].Seq) || h.log().Floor() != s0 {
			t.Fatalf("after both cursors acked seq %d only: log Acknowledged %v, %v, Floor %d; want true, false, %d",
				recs[2].Seq, h.log().Acknowledged(recs[2].Seq), h.log().Acknowledged(recs[0].Seq), h.log().Floor(), s0)
		}
		h.ackAll(c2, pick(recs, 0, 1, 3))
		if f := h.log().Floor(); f != next {
			t.Fatalf("log Floor after both cursors acked everything = %d, want %d", f, next)
		}

		// Empty and Unread on one cursor leave the other as it was.
		more := h.putN("more", 3)
		got2 := h.read(c2, 1, 1)
		emptied := !unsupported(t, "Empty", c2.Empty())
		if emptied {
			checkDepth(t, c2, 0, "of cursor 2 after its Empty")
			checkDepth(t, c1, 3, "of cursor 1 after cursor 2's Empty")
			if !c2.Discarded(got2[0].Seq) {
				t.Fatalf("cursor 2 Discarded(%d) false after its Empty", got2[0].Seq)
			}
		}
		got1 := h.readAll(c1, 3)
		same(t, "cursor 1 reads after cursor 2's Empty", got1, more)
		if c1.Discarded(got1[0].Seq) {
			t.Fatalf("cursor 1 Discarded(%d) true after cursor 2's Empty", got1[0].Seq)
		}
		if err := c1.Unread(pick(got1, 1)); !unsupported(t, "Unread", err) {
			same(t, "cursor 1 reads what it gave back", h.readAll(c1, 1), pick(more, 1))
		}
		if !emptied {
			h.ackAll(c2, got2)
			same(t, "cursor 2 reads the rest", h.readAll(c2, 2), more[1:])
		}
		h.readNone(c2, "cursor 2, after cursor 1 gave a record back")
	})

	t.Run("Reopen", func(t *testing.T) {
		h := newHarness(t, open, defaultConfig)
		if h.s.Reopen == nil {
			t.Log("not checked: the store sets no Reopen (it keeps nothing across Close)")
			return
		}
		c2 := h.newCursor("second")
		recs := h.putN("reopen", 6)
		got := h.read(h.cursor(), 4, 4)
		h.ackAll(h.cursor(), pick(recs, 3, 1))
		// Given back and not read again: as any record not acknowledged.
		if err := h.cursor().Unread(pick(got, 2)); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Unread: %v", err)
		}
		if c2 != nil {
			h.readAll(c2, 6)
			h.ackAll(c2, pick(recs, 5, 0))
		}
		next := h.log().NextSeq()

		if !h.reopen() {
			return
		}
		if got := h.log().NextSeq(); got != next {
			t.Fatalf("NextSeq after reopening = %d, want %d", got, next)
		}
		c1 := h.cursor()
		cursorHolds(t, c1, "1", recs, seqsOf(pick(recs, 1, 3)))
		if f := c1.Floor(); f != recs[0].Seq {
			t.Fatalf("Floor after reopening = %d, want %d", f, recs[0].Seq)
		}
		same(t, "records not acknowledged, read again after reopening", h.readAll(c1, 4), pick(recs, 0, 2, 4, 5))
		h.readNone(c1, "after reading again every record not acknowledged")
		if c2 != nil {
			c2 = h.newCursor("second")
			cursorHolds(t, c2, "2", recs, seqsOf(pick(recs, 0, 5)))
			same(t, "cursor 2's records not acknowledged, after reopening", h.readAll(c2, 4), pick(recs, 1, 2, 3, 4))
			if f := h.log().Floor(); f != recs[0].Seq {
				t.Fatalf("log Floor after reopening = %d, want %d", f, recs[0].Seq)
			}
		}
		b := h.body("after", 0)
		if seq := h.put(b); seq != next {
			t.Fatalf("first Put after reopening got seq %d, want %d", seq, next)
		}
		same(t, "record put after reopening", h.readAll(c1, 1), []diskqueue.Record{{Seq: next, Body: b}})
	})
}
