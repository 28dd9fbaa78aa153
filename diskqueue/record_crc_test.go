package diskqueue

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestFrameCRC checks frameCRC against the definition FORMAT.md gives:
// CRC-32C over the four length bytes followed by every byte after the CRC.
func TestFrameCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
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
