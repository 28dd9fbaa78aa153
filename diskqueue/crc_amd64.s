//go:build !purego

#include "textflag.h"

// func crcHeaderSSE42(length uint32, flags byte, seq, ts uint64) uint32
//
// The CRC-32C, in hash/crc32's form, of a record header's checksummed
// bytes (length, flags, seq, ts; FORMAT.md), from registers. CRC32 takes
// a register's bytes lowest first, so each big-endian field is
// byte-swapped before.
TEXT ·crcHeaderSSE42(SB), NOSPLIT, $0-28
	MOVL $0xffffffff, CX
	MOVL length+0(FP), AX
	BSWAPL AX
	CRC32L AX, CX
	CRC32B flags+4(FP), CX
	MOVQ seq+8(FP), AX
	BSWAPQ AX
	CRC32Q AX, CX
	MOVQ ts+16(FP), AX
	BSWAPQ AX
	CRC32Q AX, CX
	NOTL CX
	MOVL CX, ret+24(FP)
	RET

// func crcUpdateSSE42(crc uint32, p []byte) uint32
//
// crc32.Update(crc, the Castagnoli table, p) for short p: eight bytes a
// step from wherever p starts (an unaligned load costs nothing extra on
// the CPUs this runs on), then four, two, one; no dispatch in between.
TEXT ·crcUpdateSSE42(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), CX
	NOTL CX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), DX
	CMPQ DX, $8
	JB   four
eight:
	CRC32Q (SI), CX
	ADDQ $8, SI
	SUBQ $8, DX
	CMPQ DX, $8
	JAE  eight
four:
	CMPQ DX, $4
	JB   two
	CRC32L (SI), CX
	ADDQ $4, SI
	SUBQ $4, DX
two:
	CMPQ DX, $2
	JB   one
	CRC32W (SI), CX
	ADDQ $2, SI
	SUBQ $2, DX
one:
	CMPQ DX, $0
	JE   done
	CRC32B (SI), CX
done:
	NOTL CX
	MOVL CX, ret+32(FP)
	RET
