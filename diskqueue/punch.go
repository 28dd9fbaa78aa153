package diskqueue

import (
	"fmt"
	"io"
)

// A punched prefix: on a file system too full for the next segment, the
// writer frees the blocks of the active segment's records that every
// cursor has acknowledged (recycleActiveLocked), from the first record on,
// so the log reads as zeros from its header to the first record kept. No
// frame is all zeros, so a log whose first frame is zeros behind a header
// that checks out was punched: Open, a segment's first use and Verify find
// where its records resume (punchedPrefix) and set segment.keptFrom, and
// reads of the seqs before it find them gone.

// punchedPrefix reports whether the log of the segment at base, size
// bytes, was punched from its first record on, and where its records
// resume: the first frame after the zeros that checks out with a seq from
// base on. The hole ends exactly where a record starts (the punch's end is
// one), and a frame's length field is never zero, so that frame starts at
// most 3 bytes before the first byte that is not zero. found is false when
// nothing after the zeros checks out (every record was freed).
func (l *Log) punchedPrefix(log file, base uint64, size int64) (off int64, seq uint64, punched, found bool) {
	head := make([]byte, recordHeaderSize)
	if n, _ := log.ReadAt(head, fileHeaderSize); n < len(head) || !allZero(head) {
		return 0, 0, false, false
	}
	buf := make([]byte, 256<<10)
	for at := int64(fileHeaderSize); at < size; {
		n, err := log.ReadAt(buf[:min(int64(len(buf)), size-at)], at)
		for i, b := range buf[:n] {
			if b == 0 {
				continue
			}
			z := at + int64(i)
			for p := max(fileHeaderSize, z-3); p <= z; p++ {
				if h, _, _, err := l.readFrameAt(log, p, size); err == nil && h.seq >= base {
					return p, h.seq, true, true
				}
			}
			return 0, 0, true, false // not a record: damage, which readers report
		}
		if err != nil && err != io.EOF || n == 0 {
			break
		}
		at += int64(n)
	}
	return 0, 0, true, false
}

// notKept is the error for a read of seq, whose record's blocks were
// freed in place, every cursor having acknowledged it (punchedPrefix).
func notKept(seg *segment, seq uint64) error {
	return fmt.Errorf("%w: seq %d was acknowledged and its space freed (segment %d keeps seqs from %d)", ErrNotFound, seq, seg.base, seg.keptFrom.Load())
}

// punchedBelow reports whether seq's record in seg had its blocks freed.
func (s *segment) punchedBelow(seq uint64) bool { return seq < s.keptFrom.Load() }
