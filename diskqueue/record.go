package diskqueue

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// Part of the on-disk format; changing any of these requires a new version.
// FORMAT.md describes each byte.
const (
	formatVersion = 1
	// formatVersionCompacted is the version of a compacted segment's log
	// and sequence index (compact.go): the log skips the seqs of records
	// compaction removed, and their index entries are marked
	// (indexRemoved). Other files, and segments never compacted, stay at
	// formatVersion.
	formatVersionCompacted = 2

	// fileHeaderSize is the size of the header that starts every file the
	// queue writes: magic, version, three reserved bytes, base seq.
	fileHeaderSize = 16

	// recordHeaderSize is the fixed part of a record frame:
	// length(4) crc(4) flags(1) seq(8) timestamp(8).
	recordHeaderSize = 25
	// lengthSize is the int32 length prefix nsqd's disk queue also uses; the
	// length counts every byte after itself.
	lengthSize = 4
	// frameFixedAfterLength is what the length counts besides the body.
	frameFixedAfterLength = recordHeaderSize - lengthSize

	// flagSnappy marks a body stored snappy-compressed (block format).
	flagSnappy = 1 << 0
	// knownFlags is every flag bit this version understands; any other bit set
	// means the record was damaged or written by a newer version.
	knownFlags = flagSnappy

	// indexEntrySize is the width of one sequence-index entry: the uint32
	// offset of record base+i inside its segment.
	indexEntrySize = 4
	// timeIndexEntrySize is one time-index entry: int64 timestamp (the running
	// maximum) and uint64 seq.
	timeIndexEntrySize = 16

	// maxBodyLimit keeps every frame length a valid positive int32.
	maxBodyLimit = math.MaxInt32 - frameFixedAfterLength
)

// File magics, one per kind of file, so a file put in the wrong place is
// rejected rather than misread.
var (
	magicLog       = [4]byte{'S', 'Q', 'L', 'G'}
	magicIndex     = [4]byte{'S', 'Q', 'I', 'X'}
	magicTimeIndex = [4]byte{'S', 'Q', 'T', 'I'}
	magicCursor    = [4]byte{'S', 'Q', 'C', 'R'}
)

// crcTable is the one CRC-32C (Castagnoli) table the package uses; the
// standard library picks the hardware instruction when there is one.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// frameSize is the number of bytes a record with a body of n bytes takes on
// disk.
func frameSize(n int) int { return recordHeaderSize + n }

// appendRecord appends the frame of one record to dst and returns the
// extended slice. body is stored as given; flags say how.
//
//	0        4       8       9          17          25
//	| length | crc32c | flags | seq uint64 | ts int64 | body ... |
//
// length (int32 BE) counts every byte after itself; the CRC covers the length
// bytes and every byte after the CRC, so a zeroed header never checks out.
func appendRecord(dst []byte, flags byte, seq uint64, ts int64, body []byte) []byte {
	return appendFrame(dst, flags, seq, ts, nil, body, -1)
}

// appendFrame is appendRecord of the body head followed by body, stamped
// with ts at stampAt of it unless stampAt is negative (encodeFrame).
func appendFrame(dst []byte, flags byte, seq uint64, ts int64, head, body []byte, stampAt int) []byte {
	start := len(dst)
	n := frameSize(len(head) + len(body))
	if cap(dst)-start < n {
		grown := make([]byte, start, 2*cap(dst)+n)
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+n]
	encodeFrame(dst[start:], flags, seq, ts, head, body, stampAt)
	return dst
}

// encodeRecord writes the frame of one record into frame, which must be
// exactly frameSize(len(body)) bytes.
func encodeRecord(frame []byte, flags byte, seq uint64, ts int64, body []byte) {
	encodeFrame(frame, flags, seq, ts, nil, body, -1)
}

// encodeFrame writes the frame of the record whose body is head followed
// by body into frame, which must be exactly frameSize(len(head)+len(body))
// bytes, and, unless stampAt is negative, ts at stampAt of the body
// (PutWithHead): the append path encodes straight into the mapped log with
// it, so a caller's header costs no copy of its own.
func encodeFrame(frame []byte, flags byte, seq uint64, ts int64, head, body []byte, stampAt int) {
	length := uint32(len(frame) - lengthSize)
	binary.BigEndian.PutUint32(frame[0:4], length)
	frame[8] = flags
	binary.BigEndian.PutUint64(frame[9:17], seq)
	binary.BigEndian.PutUint64(frame[17:25], uint64(ts))
	stored := frame[recordHeaderSize:]
	copy(stored[copy(stored, head):], body)
	if stampAt >= 0 {
		binary.BigEndian.PutUint64(stored[stampAt:], uint64(ts))
	}
	binary.BigEndian.PutUint32(frame[4:8], recordCRC(frame, length, flags, seq, ts, head, stampAt, body))
}

// crcSlice4 are the tables of CRC-32C slicing by 4: crcSlice4[k][b] is
// the CRC of byte b followed by k zero bytes.
var crcSlice4 = func() (t [4][256]uint32) {
	t[0] = *crcTable
	for k := 1; k < 4; k++ {
		for i := range 256 {
			t[k][i] = t[k-1][i]>>8 ^ t[0][byte(t[k-1][i])]
		}
	}
	return t
}()

// frameCRC computes the checksum of a complete frame, skipping the CRC field.
// The four length bytes go through four table lookups that do not wait on
// one another (slicing by 4: a call of crc32.Update for them would take a
// third of the time for a small frame, and the byte-at-a-time loop this
// replaced took 24 ns for a 125-byte frame against 17); the rest through
// crc32.Update, on the CPU's CRC instruction where there is one. A short
// frame on amd64 goes through the CRC instruction alone (shortFrameCRC).
func frameCRC(frame []byte) uint32 {
	if c, ok := shortFrameCRC(frame); ok {
		return c
	}
	c := ^binary.LittleEndian.Uint32(frame[0:4])
	c = crcSlice4[3][byte(c)] ^ crcSlice4[2][byte(c>>8)] ^ crcSlice4[1][byte(c>>16)] ^ crcSlice4[0][c>>24]
	return crc32.Update(^c, crcTable, frame[8:])
}

// recordHeader is the decoded fixed part of a frame.
type recordHeader struct {
	flags byte
	seq   uint64
	ts    int64
}

// frameLength reads the length prefix at the start of b and returns the full
// frame size it announces. It checks the length against the limits before
// anything is allocated from it.
func frameLength(b []byte, maxBody int) (int, error) {
	if len(b) < lengthSize {
		return 0, errShortFrame
	}
	l := int64(int32(binary.BigEndian.Uint32(b[0:4])))
	if l < frameFixedAfterLength || l-frameFixedAfterLength > int64(maxBody) {
		return 0, fmt.Errorf("%w: record length %d out of range", ErrCorrupt, l)
	}
	return int(l) + lengthSize, nil
}

// decodeRecord checks one frame at the start of b and returns its header and
// stored body (a sub-slice of b) and the frame size. It never returns a body
// whose checksum failed. maxBody bounds the length a frame may announce.
func decodeRecord(b []byte, maxBody int) (recordHeader, []byte, int, error) {
	n, err := frameLength(b, maxBody)
	if err != nil {
		return recordHeader{}, nil, 0, err
	}
	if len(b) < n {
		return recordHeader{}, nil, 0, errShortFrame
	}
	frame := b[:n]
	if got, want := frameCRC(frame), binary.BigEndian.Uint32(frame[4:8]); got != want {
		return recordHeader{}, nil, 0, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, want, got)
	}
	h := recordHeader{
		flags: frame[8],
		seq:   binary.BigEndian.Uint64(frame[9:17]),
		ts:    int64(binary.BigEndian.Uint64(frame[17:25])),
	}
	if h.flags&^knownFlags != 0 {
		return recordHeader{}, nil, 0, fmt.Errorf("%w: unknown record flags %#x", ErrCorrupt, h.flags)
	}
	return h, frame[recordHeaderSize:], n, nil
}

// appendFileHeader appends the 16-byte header that starts every file.
//
//	0        4     5          8                 16
//	| magic  | ver | reserved | base seq uint64 |
func appendFileHeader(dst []byte, magic [4]byte, base uint64) []byte {
	return appendFileHeaderVersion(dst, magic, formatVersion, base)
}

// appendFileHeaderVersion is appendFileHeader with a version: a compacted
// segment's log and index have formatVersionCompacted.
func appendFileHeaderVersion(dst []byte, magic [4]byte, version byte, base uint64) []byte {
	dst = append(dst, magic[:]...)
	dst = append(dst, version, 0, 0, 0)
	return binary.BigEndian.AppendUint64(dst, base)
}

// decodeFileHeader validates a header of the wanted kind, of version 1.
func decodeFileHeader(b []byte, want [4]byte) (uint64, error) {
	base, _, err := decodeHeader(b, want, formatVersion)
	return base, err
}

// decodeSegmentHeader validates the header of a segment's log or index,
// which may be of a compacted segment (version 2) or not (version 1).
func decodeSegmentHeader(b []byte, want [4]byte) (base uint64, compacted bool, err error) {
	base, version, err := decodeHeader(b, want, formatVersionCompacted)
	return base, version == formatVersionCompacted, err
}

// decodeHeader validates a header of the wanted kind, of any version from
// 1 to newest.
func decodeHeader(b []byte, want [4]byte, newest byte) (uint64, byte, error) {
	if len(b) < fileHeaderSize {
		return 0, 0, fmt.Errorf("%w: file header is %d bytes, want %d", ErrCorrupt, len(b), fileHeaderSize)
	}
	if [4]byte(b[0:4]) != want {
		return 0, 0, fmt.Errorf("%w: bad magic %q, want %q", ErrCorrupt, b[0:4], want[:])
	}
	if b[4] < formatVersion || b[4] > newest {
		return 0, 0, fmt.Errorf("%w: format version %d (this build reads %d to %d)", ErrUnsupportedVersion, b[4], formatVersion, newest)
	}
	if b[5]|b[6]|b[7] != 0 {
		return 0, 0, fmt.Errorf("%w: reserved header bytes are not zero", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(b[8:16]), b[4], nil
}

// appendTimeEntry appends one time-index entry: the running maximum of
// timestamps up to seq, then seq.
func appendTimeEntry(dst []byte, ts int64, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return binary.BigEndian.AppendUint64(dst, seq)
}
