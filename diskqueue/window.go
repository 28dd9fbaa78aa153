package diskqueue

import "io"

// readChunk is how much of a segment a reader pulls in with one pread.
const readChunk = 256 << 10

// dropStep is how much of a mapped log a reader goes through before it
// drops the pages behind it from the resident set (dropPages): a drain
// then keeps about that much of the log resident, not the whole segment.
const dropStep = 1 << 20

// window buffers a stretch of a file so that records are decoded from
// memory, with one pread per readChunk bytes; or, for a reader whose
// generation is mapped (m), hands out the mapping's bytes themselves.
// Whoever sets m touches what bytesAt returns only under a fault guard
// (reader.decodeAt), and clears m if touching it faults.
type window struct {
	r     io.ReaderAt
	buf   []byte // bytes of r starting at off
	off   int64
	chunk int64 // read-ahead size; zero means readChunk
	m     []byte
	// dropped is where the pages of m not yet dropped begin (a multiple
	// of pageSize: madvise takes a page-aligned start).
	dropped int64
	touched int64 // the end of what bytesAt handed out of m
}

func (w *window) reset(r io.ReaderAt) {
	w.r, w.buf, w.off, w.m, w.dropped, w.touched = r, w.buf[:0], 0, nil, 0, 0
}

// dropBehind drops the pages of m wholly before off from the resident set
// once dropStep of them are waiting.
func (w *window) dropBehind(off int64) {
	if end := off &^ int64(pageSize-1); end-w.dropped >= dropStep && end <= int64(len(w.m)) {
		dropPages(w.m[w.dropped:end])
		w.dropped = end
	}
}

// dropAll drops every page of m the window touched and has not dropped:
// the reader is leaving the mapping.
func (w *window) dropAll() {
	if end := min(roundUp(w.touched, int64(pageSize)), int64(len(w.m))); end > w.dropped {
		dropPages(w.m[w.dropped:end])
		w.dropped = end
	}
}

// bytesAt returns n bytes at off, reading ahead when they are not buffered.
// limit is the readable end; asking past it is errShortFrame.
func (w *window) bytesAt(off int64, n int, limit int64) ([]byte, error) {
	if off >= w.off && off+int64(n) <= w.off+int64(len(w.buf)) {
		return w.buf[off-w.off:][:n], nil
	}
	if off+int64(n) > limit {
		return nil, errShortFrame
	}
	if end := off + int64(n); w.m != nil && off >= 0 && end <= int64(len(w.m)) {
		w.touched = max(w.touched, end)
		return w.m[off:end:end], nil
	}
	chunk := w.chunk
	if chunk == 0 {
		chunk = readChunk
	}
	want := min(max(int64(n), chunk), limit-off)
	if int64(cap(w.buf)) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	m, err := w.r.ReadAt(w.buf, off)
	w.buf, w.off = w.buf[:m], off
	if m < int(want) {
		if err == io.EOF {
			// The file is shorter than its known size: someone cut it.
			return nil, errShortFrame
		}
		return nil, err
	}
	return w.buf[:n], nil
}

// frameAt decodes the frame at off: the length first, checked against
// maxBody before anything is read from it, then the whole frame. body
// points into the window's buffer.
func (w *window) frameAt(off, limit int64, maxBody int) (recordHeader, []byte, int, error) {
	head, err := w.bytesAt(off, lengthSize, limit)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	n, err := frameLength(head, maxBody)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	frame, err := w.bytesAt(off, n, limit)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	return decodeRecord(frame, maxBody)
}
