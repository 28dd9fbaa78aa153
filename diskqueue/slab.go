package diskqueue

import (
	"fmt"
	"time"

	"github.com/golang/snappy"
)

// slabSize is the size of the blocks small bodies are carved from, so a
// drain allocates once per block rather than once per record.
const (
	slabSize    = 32 << 10
	slabMaxBody = 1 << 10
)

// slab hands out small body buffers from one allocation. Each buffer is
// capped with a full slice expression, so a caller appending to its body
// reallocates instead of writing into its neighbour's. buf changes only
// when a block runs out, and used with each body: storing a pointer into
// the heap costs a write barrier check, and while the collector runs a
// barrier, which a drain would pay per record.
type slab struct {
	buf  []byte
	used int
}

func (s *slab) copy(b []byte) []byte {
	if len(b) > slabMaxBody {
		return append(make([]byte, 0, len(b)), b...)
	}
	if len(s.buf)-s.used < len(b) {
		s.buf, s.used = make([]byte, slabSize), 0
	}
	start := s.used
	end := start + copy(s.buf[start:], b)
	s.used = end
	return s.buf[start:end:end]
}

// makeRecord makes a Record the caller owns of a checked body: copied
// into sl, or with a nil slab stored itself, which must then be the
// caller's own bytes; decompressed either way if it was compressed.
func makeRecord(h recordHeader, stored []byte, sl *slab) (Record, error) {
	rec := Record{Seq: h.seq, Time: time.Unix(0, h.ts)}
	if h.flags&flagSnappy != 0 {
		body, err := snappy.Decode(nil, stored)
		if err != nil {
			return Record{}, fmt.Errorf("%w: seq %d: snappy: %v", ErrCorrupt, h.seq, err)
		}
		rec.Body = body
		return rec, nil
	}
	if sl == nil {
		rec.Body = stored[:len(stored):len(stored)] // the caller's own bytes
	} else {
		rec.Body = sl.copy(stored)
	}
	return rec, nil
}
