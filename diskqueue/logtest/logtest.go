package logtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// Config is what the suite asks of the store an [Opener] opens.
type Config struct {
	// MaxRecordBytes and MinRecordBytes are the limits Put should
	// enforce. An implementation that cannot set them opens with its own;
	// the suite logs the difference and checks the limits the store
	// reports.
	MaxRecordBytes int
	MinRecordBytes int
}

// Store is one implementation under test: a [channel.Store] (Log and
// Cursor are required, Close optional) and what the suite needs beyond it.
type Store struct {
	channel.Store
	// NewCursor, when set, returns a new cursor over Log named name,
	// starting at the next record put; on a store Reopen returned, it
	// opens again the cursor of that name created before, where it was.
	// Nil for an implementation with one cursor only.
	NewCursor func(t *testing.T, name string) channel.Cursor
	// Reopen, when set, opens again the storage of this store, after the
	// suite closed it with Close, with the Config it was opened with. Nil
	// for an implementation that keeps nothing across Close.
	Reopen func(t *testing.T) Store
}

// Opener opens an empty store in a fresh place, for one subtest. It may
// use t.TempDir and t.Cleanup; the suite closes the store itself.
type Opener func(t *testing.T, cfg Config) Store

// Run runs the whole suite against the stores open opens, each group and
// each behaviour in a subtest of its own (go test -run
// 'Conformance/Ack/Floor' picks one).
func Run(t *testing.T, open Opener) {
	groups := []struct {
		name string
		run  func(*testing.T, Opener)
	}{
		{"Append", testAppend},
		{"Limits", testLimits},
		{"Read", testRead},
		{"Ack", testAck},
		{"Cursor", testCursor},
		{"Concurrency", testConcurrency},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) { g.run(t, open) })
	}
}

// guard cuts a wait for something the store should do (hand out a record
// put before, return from a cancelled ReadBatch) that never came: a hang
// made into a failure with a message, not a timing assertion.
const guard = 2 * time.Minute

// defaultConfig leaves room for every body the suite writes outside the
// limits tests.
var defaultConfig = Config{MaxRecordBytes: 4096}

// harness is one store under test in one subtest.
type harness struct {
	t      *testing.T
	s      Store
	closed bool
}

func newHarness(t *testing.T, open Opener, cfg Config) *harness {
	t.Helper()
	s := open(t, cfg)
	if s.Log == nil || s.Cursor == nil {
		t.Fatal("logtest: the Opener returned a Store without a Log or a Cursor")
	}
	h := &harness{t: t, s: s}
	t.Cleanup(h.close)
	return h
}

func (h *harness) log() channel.Log       { return h.s.Log }
func (h *harness) cursor() channel.Cursor { return h.s.Cursor }

func (h *harness) close() {
	if h.closed {
		return
	}
	h.closed = true
	if h.s.Close != nil {
		if err := h.s.Close(); err != nil {
			h.t.Errorf("Close: %v", err)
		}
	}
}

// reopen closes the store and opens its storage again, or says why it
// cannot and returns false.
func (h *harness) reopen() bool {
	h.t.Helper()
	if h.s.Reopen == nil {
		h.t.Log("not checked: the store sets no Reopen (it keeps nothing across Close)")
		return false
	}
	if h.s.Close == nil {
		h.t.Fatal("logtest: a Store with Reopen needs Close")
	}
	reopen := h.s.Reopen
	h.close()
	s := reopen(h.t)
	if s.Log == nil || s.Cursor == nil {
		h.t.Fatal("logtest: Reopen returned a Store without a Log or a Cursor")
	}
	h.s, h.closed = s, false
	return true
}

// newCursor returns a second cursor, or says why there is none and
// returns nil.
func (h *harness) newCursor(name string) channel.Cursor {
	h.t.Helper()
	if h.s.NewCursor == nil {
		h.t.Log("not checked: the store sets no NewCursor (it has one cursor only)")
		return nil
	}
	c := h.s.NewCursor(h.t, name)
	if c == nil {
		h.t.Fatalf("logtest: NewCursor(%q) returned nil", name)
	}
	return c
}

// body returns a distinct body named by tag and i, at least
// MinRecordBytes long.
func (h *harness) body(tag string, i int) []byte {
	b := fmt.Appendf(nil, "%s-%04d", tag, i)
	for len(b) < h.log().MinRecordBytes() {
		b = append(b, '.')
	}
	return b
}

// put appends body with Put and returns its seq, which NextSeq told
// before: Put has no other way to say it.
func (h *harness) put(body []byte) uint64 {
	h.t.Helper()
	seq := h.log().NextSeq()
	if err := h.log().Put(h.t.Context(), body); err != nil {
		h.t.Fatalf("Put(%q): %v", body, err)
	}
	if got := h.log().NextSeq(); got != seq+1 {
		h.t.Fatalf("NextSeq after a Put = %d, want %d: seqs are dense", got, seq+1)
	}
	return seq
}

// putN puts n records tagged tag and returns them as they should be read.
func (h *harness) putN(tag string, n int) []diskqueue.Record {
	h.t.Helper()
	recs := make([]diskqueue.Record, n)
	for i := range recs {
		b := h.body(tag, i)
		recs[i] = diskqueue.Record{Seq: h.put(b), Body: b}
	}
	return recs
}

// read reads exactly n records from c with ReadBatch, at most batch at a
// time (never asking for more than n, so it takes nothing past them).
func (h *harness) read(c channel.Cursor, n, batch int) []diskqueue.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), guard)
	defer cancel()
	out := make([]diskqueue.Record, 0, n)
	dst := make([]diskqueue.Record, batch)
	for len(out) < n {
		want := min(batch, n-len(out))
		k, err := c.ReadBatch(ctx, dst[:want])
		if k < 0 || k > want {
			h.t.Fatalf("ReadBatch into %d slots returned %d", want, k)
		}
		out = append(out, dst[:k]...)
		if errors.Is(err, context.DeadlineExceeded) {
			h.t.Fatalf("ReadBatch handed out %d of %d records ready before it, then waited %v for the rest", len(out), n, guard)
		}
		if err != nil {
			h.t.Fatalf("ReadBatch after %d of %d records: %v", len(out), n, err)
		}
		if k == 0 {
			h.t.Fatalf("ReadBatch returned no record and no error")
		}
	}
	return out
}

// readAll is read of n records one batch of 16 at a time.
func (h *harness) readAll(c channel.Cursor, n int) []diskqueue.Record {
	h.t.Helper()
	return h.read(c, n, 16)
}

// readNone checks that c has nothing to hand out: ReadBatch with a ctx
// already cancelled returns the ctx's error and no record.
func (h *harness) readNone(c channel.Cursor, why string) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.t.Context())
	cancel()
	dst := make([]diskqueue.Record, 4)
	k, err := c.ReadBatch(ctx, dst)
	if k != 0 {
		h.t.Fatalf("%s: ReadBatch handed out %d record(s), first seq %d %q; want none", why, k, dst[0].Seq, dst[0].Body)
	}
	if !errors.Is(err, context.Canceled) {
		h.t.Fatalf("%s: ReadBatch with a cancelled ctx and nothing to read = %v, want context.Canceled", why, err)
	}
}

// nextIs puts a marker record and checks that it is the next record c
// hands out: what was before it (discarded, never stored, not given back)
// is not.
func (h *harness) nextIs(c channel.Cursor, why string) {
	h.t.Helper()
	b := h.body("marker", 0)
	seq := h.put(b)
	got := h.read(c, 1, 1)[0]
	if got.Seq != seq || !bytes.Equal(got.Body, b) {
		h.t.Fatalf("%s: next record handed out is seq %d %q, want the one put after, seq %d %q", why, got.Seq, got.Body, seq, b)
	}
	if err := c.Ack(got.Seq); err != nil {
		h.t.Fatalf("Ack(%d): %v", got.Seq, err)
	}
}

// ackAll acknowledges recs on c, in order.
func (h *harness) ackAll(c channel.Cursor, recs []diskqueue.Record) {
	h.t.Helper()
	for _, r := range recs {
		if err := c.Ack(r.Seq); err != nil {
			h.t.Fatalf("Ack(%d): %v", r.Seq, err)
		}
	}
}

// same checks that got are want: the same seqs, in order, with the same
// bodies.
func same(t *testing.T, what string, got, want []diskqueue.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records %v, want %d %v", what, len(got), seqsOf(got), len(want), seqsOf(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Body, want[i].Body) {
			t.Fatalf("%s: record %d is seq %d %q, want seq %d %q", what, i, got[i].Seq, got[i].Body, want[i].Seq, want[i].Body)
		}
	}
}

func seqsOf(recs []diskqueue.Record) []uint64 {
	s := make([]uint64, len(recs))
	for i, r := range recs {
		s[i] = r.Seq
	}
	return s
}

// pick returns recs[i] for each i in idx.
func pick(recs []diskqueue.Record, idx ...int) []diskqueue.Record {
	out := make([]diskqueue.Record, len(idx))
	for j, i := range idx {
		out[j] = recs[i]
	}
	return out
}

// unsupported reports whether err says the method is not implemented,
// and logs what the suite then does not check; any other error fails.
func unsupported(t *testing.T, method string, err error) bool {
	t.Helper()
	if err == nil {
		return false
	}
	if errors.Is(err, errors.ErrUnsupported) {
		t.Logf("not checked: %s is unsupported (%v); checking that it says so and changes nothing", method, err)
		return true
	}
	t.Fatalf("%s: %v", method, err)
	return false
}

// stillUnsupported checks that a method that said ErrUnsupported once
// says so again: a capability is there or not, not now and then.
func stillUnsupported(t *testing.T, method string, err error) {
	t.Helper()
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("%s said ErrUnsupported once, then %v: a capability is there or not", method, err)
	}
}

// collect runs an iterator of records to its end, or to the first error,
// which it returns.
func collect(seq iter.Seq2[diskqueue.Record, error]) ([]diskqueue.Record, error) {
	var out []diskqueue.Record
	for r, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// checkDepth fails unless c's Depth is want.
func checkDepth(t *testing.T, c channel.Cursor, want int64, when string) {
	t.Helper()
	if got := c.Depth(); got != want {
		t.Fatalf("Depth %s = %d, want %d", when, got, want)
	}
}
