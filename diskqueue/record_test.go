package diskqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, body := range [][]byte{nil, {}, []byte("x"), bytes.Repeat([]byte("ab"), 5000)} {
		frame := appendRecord(nil, flagSnappy, 42, -7, body)
		if len(frame) != frameSize(len(body)) {
			t.Fatalf("frame size: got %d, want %d", len(frame), frameSize(len(body)))
		}
		if got := int(binary.BigEndian.Uint32(frame)); got != len(frame)-lengthSize {
			t.Fatalf("length prefix: got %d, want %d (bytes after itself)", got, len(frame)-lengthSize)
		}
		h, got, n, err := decodeRecord(frame, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(frame) || h.seq != 42 || h.ts != -7 || h.flags != flagSnappy || !bytes.Equal(got, body) {
			t.Fatalf("decode: got %+v %q n=%d", h, got, n)
		}
	}
}

// The frame checksum is FORMAT.md's: CRC-32C of the length bytes followed
// by every byte after the CRC field, whatever the lengths and length bytes.
func TestFrameCRCIsCRC32COfLengthAndRest(t *testing.T) {
	for n := 0; n < 600; n += 1 + n/8 {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i*131 + n)
		}
		frame := appendRecord(nil, byte(n&flagSnappy), uint64(n)*0x9e3779b97f4a7c15, int64(n)*-12345, body)
		covered := append(append([]byte(nil), frame[0:4]...), frame[8:]...)
		if got, want := binary.BigEndian.Uint32(frame[4:8]), crc32.Checksum(covered, crc32.MakeTable(crc32.Castagnoli)); got != want {
			t.Fatalf("body of %d bytes: stored CRC %08x, CRC-32C of length and rest %08x", n, got, want)
		}
	}
}

func TestDecodeRecordDamage(t *testing.T) {
	good := appendRecord(nil, 0, 7, 1000, []byte("hello, world"))
	tests := []struct {
		name   string
		damage func([]byte) []byte
		want   error
	}{
		{"empty", func(b []byte) []byte { return nil }, errShortFrame},
		{"short length", func(b []byte) []byte { return b[:3] }, errShortFrame},
		{"short body", func(b []byte) []byte { return b[:len(b)-1] }, errShortFrame},
		{"zeros", func(b []byte) []byte { return make([]byte, len(b)) }, ErrCorrupt},
		{"length too small", func(b []byte) []byte { binary.BigEndian.PutUint32(b, 3); return b }, ErrCorrupt},
		{"length negative", func(b []byte) []byte { binary.BigEndian.PutUint32(b, math.MaxUint32); return b }, ErrCorrupt},
		{"length over limit", func(b []byte) []byte { binary.BigEndian.PutUint32(b, 1<<30); return b }, ErrCorrupt},
		{"length changed", func(b []byte) []byte { b[3]--; return b }, ErrCorrupt},
		{"crc flipped", func(b []byte) []byte { b[5] ^= 1; return b }, ErrCorrupt},
		{"flags flipped", func(b []byte) []byte { b[8] ^= 1; return b }, ErrCorrupt},
		{"seq flipped", func(b []byte) []byte { b[16] ^= 1; return b }, ErrCorrupt},
		{"time flipped", func(b []byte) []byte { b[20] ^= 0x80; return b }, ErrCorrupt},
		{"body flipped", func(b []byte) []byte { b[len(b)-1] ^= 0x10; return b }, ErrCorrupt},
		{"unknown flag with good crc", func(b []byte) []byte {
			return appendRecord(nil, 0x80, 7, 1000, []byte("hello, world"))
		}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.damage(append([]byte(nil), good...))
			_, body, _, err := decodeRecord(b, 1<<20)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if body != nil {
				t.Fatalf("got body %q with an error", body)
			}
		})
	}
}

func TestZeroHeaderNeverValid(t *testing.T) {
	// Zeros mark the end of written data; the CRC of a zero length is not
	// zero, so a zeroed frame of any size is rejected.
	for n := 0; n < 64; n++ {
		if _, _, _, err := decodeRecord(make([]byte, n), 1<<20); err == nil {
			t.Fatalf("%d zero bytes decoded as a record", n)
		}
	}
}

func TestFileHeader(t *testing.T) {
	h := appendFileHeader(nil, magicLog, 12345)
	if len(h) != fileHeaderSize {
		t.Fatalf("header size %d", len(h))
	}
	if base, err := decodeFileHeader(h, magicLog); err != nil || base != 12345 {
		t.Fatalf("got %d, %v", base, err)
	}
	if _, err := decodeFileHeader(h, magicIndex); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong magic: got %v, want ErrCorrupt", err)
	}
	v := append([]byte(nil), h...)
	v[4] = formatVersion + 1
	if _, err := decodeFileHeader(v, magicLog); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("new version: got %v, want ErrUnsupportedVersion", err)
	}
	r := append([]byte(nil), h...)
	r[6] = 1
	if _, err := decodeFileHeader(r, magicLog); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reserved byte: got %v, want ErrCorrupt", err)
	}
	if _, err := decodeFileHeader(h[:10], magicLog); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short header: got %v, want ErrCorrupt", err)
	}
}
