//go:build !purego

package diskqueue

import (
	"encoding/binary"
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// haveCRC32 says the CPU has SSE 4.2's CRC32 instruction, which the
// assembly below needs.
var haveCRC32 = cpu.X86.HasSSE42

//go:noescape
func crcHeaderSSE42(length uint32, flags byte, seq, ts uint64) uint32

//go:noescape
func crcUpdateSSE42(crc uint32, p []byte) uint32

// shortCRC is the body size from which crc32.Update, whose three
// interleaved streams win on long input, takes over from crcUpdateSSE42.
const shortCRC = 512

// recordCRC is the checksum of the frame encodeFrame just wrote, whose
// body is head, with ts at stampAt of it unless stampAt is negative,
// followed by body: computed from the header's fields in registers and
// from the caller's head and body, not read back out of the frame: there
// (a fresh page of the mapped log) the loads wait on the lines the stores
// just missed on. 39 ns of a 100-byte Put's CPU went to the CRC read back
// with frameCRC, 20 to this (perf, 4 M Puts).
func recordCRC(frame []byte, length uint32, flags byte, seq uint64, ts int64, head []byte, stampAt int, body []byte) uint32 {
	if !haveCRC32 {
		return frameCRC(frame)
	}
	c := crcHeaderSSE42(length, flags, seq, uint64(ts))
	if len(head) > 0 {
		if stampAt >= 0 {
			var stamp [8]byte
			binary.BigEndian.PutUint64(stamp[:], uint64(ts))
			c = crcUpdateSSE42(c, head[:stampAt])
			c = crcUpdateSSE42(c, stamp[:])
			head = head[stampAt+8:]
		}
		c = crcUpdateSSE42(c, head)
	}
	if len(body) < shortCRC {
		return crcUpdateSSE42(c, body)
	}
	return crc32.Update(c, crcTable, body)
}

// shortFrameCRC is frameCRC of a frame with a body shorter than shortCRC,
// which Read checks for every record: the length bytes and the rest
// through crcUpdateSSE42, with none of the table lookups for the length
// nor crc32.Update's dispatch and alignment steps, which were a quarter
// of the CRC's time for a 125-byte frame. ok is false for a longer frame
// or a CPU without the instruction.
func shortFrameCRC(frame []byte) (crc uint32, ok bool) {
	if !haveCRC32 || len(frame) >= recordHeaderSize+shortCRC {
		return 0, false
	}
	return crcUpdateSSE42(crcUpdateSSE42(0, frame[0:4]), frame[8:]), true
}
