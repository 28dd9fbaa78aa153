//go:build !purego

#include "textflag.h"

// func prefetchWrite(p *byte)
//
// PREFETCHW of p's cache line and the next (the Go assembler has no
// mnemonic for it: 0F 0D /1). A hint: it never faults, and a CPU
// without it ignores it.
TEXT ·prefetchWrite(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	BYTE $0x0F; BYTE $0x0D; BYTE $0x48; BYTE $0x40
	RET

// func prefetchRead(p *byte)
//
// PREFETCHT0 of p's cache line and the next, for reading. A hint: it
// never faults, so p may be in a page not mapped yet.
TEXT ·prefetchRead(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	RET
