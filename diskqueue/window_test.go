package diskqueue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
)

// preadCounter is an io.ReaderAt over b that counts its calls and the
// bytes asked for, and returns err (if set) instead of reading.
type preadCounter struct {
	b      []byte
	calls  int
	asked  int
	err    error
	cutAt  int64 // when > 0, the file ends here: reads past it are short, with io.EOF
	lastAt int64
}

func (p *preadCounter) ReadAt(b []byte, off int64) (int, error) {
	p.calls++
	p.asked += len(b)
	p.lastAt = off
	if p.err != nil {
		return 0, p.err
	}
	end := int64(len(p.b))
	if p.cutAt > 0 {
		end = p.cutAt
	}
	if off >= end {
		return 0, io.EOF
	}
	n := copy(b, p.b[off:end])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// TestWindowReadsAhead: bytesAt pulls in a chunk with one pread and
// answers from it until a request leaves it; never reads past limit;
// takes a file shorter than limit for one cut short (errShortFrame), and
// passes any other read error on.
func TestWindowReadsAhead(t *testing.T) {
	data := make([]byte, 100)
	for i := range data {
		data[i] = byte(i)
	}
	r := &preadCounter{b: data}
	w := window{chunk: 16}
	w.reset(r)
	b, err := w.bytesAt(10, 4, 100)
	if err != nil || !bytes.Equal(b, data[10:14]) {
		t.Fatalf("bytesAt(10, 4): %v, %v", b, err)
	}
	if r.calls != 1 || r.asked != 16 {
		t.Fatalf("first bytesAt: %d preads of %d bytes, want one of a chunk (16)", r.calls, r.asked)
	}
	for _, off := range []int64{10, 14, 22} { // inside [10, 26)
		if b, err := w.bytesAt(off, 4, 100); err != nil || !bytes.Equal(b, data[off:off+4]) {
			t.Fatalf("bytesAt(%d, 4) from the buffer: %v, %v", off, b, err)
		}
	}
	if r.calls != 1 {
		t.Fatalf("bytesAt within the chunk read again: %d preads", r.calls)
	}
	// Straddling the chunk's end: a new pread from off, as long as the
	// request when that is more than a chunk.
	if b, err := w.bytesAt(24, 20, 100); err != nil || !bytes.Equal(b, data[24:44]) {
		t.Fatalf("bytesAt(24, 20): %v, %v", b, err)
	}
	if r.calls != 2 || r.lastAt != 24 || r.asked != 16+20 {
		t.Fatalf("bytesAt past the chunk: %d preads, the last at %d, %d bytes asked in all; want 2, 24, 36", r.calls, r.lastAt, r.asked)
	}
	// Near limit the read-ahead stops at limit.
	if _, err := w.bytesAt(90, 2, 95); err != nil || r.asked != 16+20+5 {
		t.Fatalf("bytesAt(90, 2) with limit 95: %v, %d bytes asked in all, want 41", err, r.asked)
	}
	if _, err := w.bytesAt(94, 2, 95); !errors.Is(err, errShortFrame) {
		t.Fatalf("bytesAt past limit: %v, want errShortFrame", err)
	}

	cut := &preadCounter{b: data, cutAt: 50}
	w.reset(cut)
	if _, err := w.bytesAt(40, 20, 100); !errors.Is(err, errShortFrame) {
		t.Fatalf("bytesAt of a file cut short: %v, want errShortFrame", err)
	}
	failing := &preadCounter{b: data, err: syscall.EIO}
	w.reset(failing)
	if _, err := w.bytesAt(0, 4, 100); !errors.Is(err, syscall.EIO) {
		t.Fatalf("bytesAt when pread fails: %v, want EIO", err)
	}
	// reset forgets the old file's bytes.
	w.reset(r)
	calls := r.calls
	if b, err := w.bytesAt(0, 4, 100); err != nil || !bytes.Equal(b, data[:4]) || r.calls != calls+1 {
		t.Fatalf("bytesAt after reset: %v, %v, %d preads (want a new one)", b, err, r.calls-calls)
	}
}

// TestWindowMapped: with a mapping, bytesAt hands out the mapping's bytes
// without a pread, capped so that an append cannot reach past them, and
// records how far it handed out (touched, for dropAll); what lies past
// the mapping is read from the file.
func TestWindowMapped(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10)
	r := &preadCounter{b: data}
	var w window
	w.reset(r)
	w.m = data[:50]
	b, err := w.bytesAt(20, 10, 100)
	if err != nil || !bytes.Equal(b, data[20:30]) || r.calls != 0 {
		t.Fatalf("bytesAt in the mapping: %q, %v, %d preads", b, err, r.calls)
	}
	if &b[0] != &data[20] || cap(b) != 10 {
		t.Fatalf("bytesAt in the mapping: a copy, or cap %d (want the mapping's bytes, cap 10)", cap(b))
	}
	if w.touched != 30 {
		t.Fatalf("touched %d, want 30", w.touched)
	}
	if _, err := w.bytesAt(5, 5, 100); err != nil || w.touched != 30 {
		t.Fatalf("touched moved back to %d (%v)", w.touched, err)
	}
	if b, err := w.bytesAt(45, 10, 100); err != nil || !bytes.Equal(b, data[45:55]) || r.calls != 1 {
		t.Fatalf("bytesAt across the mapping's end: %q, %v, %d preads (want 1)", b, err, r.calls)
	}
}

// TestWindowFrameAt: frameAt decodes consecutive frames, and refuses a
// length over maxBody having read no more than the length field.
func TestWindowFrameAt(t *testing.T) {
	var log []byte
	for i := range 3 {
		log = appendRecord(log, 0, uint64(100+i), int64(i), []byte(fmt.Sprintf("body %d", i)))
	}
	big := appendRecord(nil, 0, 103, 3, bytes.Repeat([]byte("x"), 1000))
	log = append(log, big...)
	r := &preadCounter{b: log}
	w := window{chunk: 4}
	w.reset(r)
	off := int64(0)
	for i := range 3 {
		h, body, n, err := w.frameAt(off, int64(len(log)), 100)
		if err != nil || h.seq != uint64(100+i) || string(body) != fmt.Sprintf("body %d", i) {
			t.Fatalf("frame %d: %+v %q, %v", i, h, body, err)
		}
		off += int64(n)
	}
	asked := r.asked
	if _, _, _, err := w.frameAt(off, int64(len(log)), 100); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a frame over maxBody: %v, want ErrCorrupt", err)
	}
	if r.asked-asked > lengthSize {
		t.Fatalf("a frame over maxBody: read %d bytes, want the length field's %d at most", r.asked-asked, lengthSize)
	}
	if _, _, _, err := w.frameAt(off, int64(len(log))-1, 2000); !errors.Is(err, errShortFrame) {
		t.Fatalf("a frame past limit: %v, want errShortFrame", err)
	}
}
