package diskqueue

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestFrameCRC checks frameCRC against the definition FORMAT.md gives:
// CRC-32C over the four length bytes followed by every byte after the CRC,
// for short frames (shortFrameCRC) and long.
func TestFrameCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 1100; n++ { // either side of shortCRC, on amd64
		frame := make([]byte, frameSize(n))
		for i := range frame {
			frame[i] = byte(r.Uint32())
		}
		want := crc32.Checksum(append(frame[0:4:4], frame[8:]...), crcTable)
		if got := frameCRC(frame); got != want {
			t.Fatalf("body of %d bytes: frameCRC %08x, want %08x", n, got, want)
		}
	}
}

// TestRecordCRC checks that encodeRecord's checksum, computed from the
// fields and the body where the CPU allows, is the frame's.
func TestRecordCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 2*1024; n += 1 + n/16 {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(r.Uint32())
		}
		frame := make([]byte, frameSize(n))
		encodeRecord(frame, byte(r.Uint32())&knownFlags, r.Uint64(), int64(r.Uint64()), body)
		if _, _, _, err := decodeRecord(frame, n); err != nil {
			t.Fatalf("body of %d bytes: %v", n, err)
		}
	}
}

// TestFrameCRCParts checks that encodeFrame's checksum, computed from the
// head, the stamp and the body apart, is the frame's, for heads with and
// without a stamp and bodies on both sides of shortCRC.
func TestFrameCRCParts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, h := range []int{1, 8, 20, 37, 100} {
		for n := 0; n < 2*1024; n += 1 + n/8 {
			head, body := make([]byte, h), make([]byte, n)
			for i := range head {
				head[i] = byte(r.Uint32())
			}
			for i := range body {
				body[i] = byte(r.Uint32())
			}
			for _, stampAt := range []int{-1, 0, h - 8, h / 3} {
				if stampAt+8 > h {
					continue
				}
				ts := int64(r.Uint64())
				frame := make([]byte, frameSize(h+n))
				encodeFrame(frame, byte(r.Uint32())&knownFlags, r.Uint64(), ts, head, body, stampAt)
				hdr, got, _, err := decodeRecord(frame, h+n)
				if err != nil {
					t.Fatalf("head %d, body %d, stamp at %d: %v", h, n, stampAt, err)
				}
				want := append(append([]byte(nil), head...), body...)
				if stampAt >= 0 {
					binary.BigEndian.PutUint64(want[stampAt:], uint64(ts))
				}
				if hdr.ts != ts || !bytes.Equal(got, want) {
					t.Fatalf("head %d, body %d, stamp at %d: body or timestamp differs", h, n, stampAt)
				}
			}
		}
	}
}
