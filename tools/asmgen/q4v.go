package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The q4v variant of the 256-bit EVEX VBMI prepared Q4_K/Q5_K one-row
// kernels (q45Loop with q4vGen set; registered where the CPU has VBMI and
// GFNI), tuned on Zen 4 (1 thread):
//
//   - a software prefetch q4vFetchAhead bytes ahead on the weights (one
//     row's kernel, not the tile one, which prefetches for itself): the
//     hardware prefetcher alone left the loop waiting on L3 and DRAM;
//   - each block's scales and mins are decoded (gprScales) between the
//     vectors of the block before, the next pair's first block's in the
//     pair before (its registers carried round the loop), not as a burst
//     of integer instructions at the block's start that held up the
//     vector ones behind it;
//   - the mins are eight words (VMOVQ, VPMOVZXBW) times the eight pair
//     sums bsums[2k]+bsums[2k+1] that kernelkit now prepares after the
//     bsums (q45pPairs): one 128-bit VPMADDWD and a shorter reduction
//     instead of the sixteen duplicated words' 256-bit one (64 and 1024
//     rows: +2.5-3.5% on the rest);
//   - the GFNI matrix is a register.
//
// Products, lanes, float operations and their order are the plain
// kernels', so the result is the same float; TestQ4VExact compares them
// bit for bit.
//
// Tried, and slower here (new/old, 64 and 1024 rows of 16 blocks, kernel
// by kernel; the loop is short of issue slots and of the two vector
// pipes that multiply and permute): q36's scale words on the stack a
// pair ahead as VPDPWSSD's embedded broadcast, decoded by VPMULTISHIFTQB
// (four ymm per block, 0.93; zmm, 0.71) or into 16 compact bytes (0.96),
// or expanded from integer registers through the stack (0.97); the same
// without any decoding (stale words, as a bound) ran 1.17-1.19, so the
// decoding, not the broadcast, is the cost. Four integer accumulators a
// block (0.97), one (0.985). d*y.d through the stack as VMULPS's
// embedded broadcast instead of a VBROADCASTSS (0.97). The prefetch a
// line in two (L3 +1%, DRAM -10%); the tile kernel's own prefetch four or
// eight blocks ahead instead of two (4096x14336: no gain). BEXTR for the
// scale indices of bytes 1 and 2 (three instructions fewer per four
// scales, two more registers: 22.3 against 22.5 GB/s in L3).
// q45TileBlocks 64 (4096x14336 untiled): 13.6-15.6 against 16.6-18.0.

// q4vGen, while set, makes q45Loop emit the q4v variant.
var q4vGen bool

// q4vFetchAhead is how far ahead of the block pair being read the q4v
// kernel prefetches its weights (Zen 4, 1 thread, 1024 rows of 16 blocks
// from L3, new/old: 256 B 1.0, 512 B 1.04-1.05, 1 KiB 1.05-1.07, 2 KiB
// 1.06-1.07, 3-4 KiB 1.06; from DRAM, shared with other benchmarks,
// 2 KiB beat 1 KiB by 10-15%, 3-6 KiB were within the noise of 2 KiB).
const q4vFetchAhead = 2048

func q4vName(fn string) string { return "q4vD" + fn[1:] } // dotQ4KP... -> q4vDotQ4KP...

// genQ4V emits the q4v kernels of a 256-bit EVEX target: Q4_K and Q5_K,
// one prepared row, and its tile form.
func genQ4V(t *target) {
	q4vGen = true
	defer func() { q4vGen = false }()
	genQ4KExact(t)
	genQ5KExact(t)
}

// q4vFetch prefetches into L1 the n bytes q4vFetchAhead past wp.
func q4vFetch(wp Register, n int) {
	for off := 0; off < n; off += 64 {
		PREFETCHT0(Mem{Base: wp, Disp: q4vFetchAhead + off})
	}
}

// gfHiNib is the GFNI affine matrix that moves bits 4..7 of each byte to
// 0..3 and clears the rest: a shift by four and mask in one instruction.
func gfHiNib() Mem {
	var m []byte
	for range 4 {
		m = append(m, 0, 0, 0, 0, 0x80, 0x40, 0x20, 0x10)
	}
	return constData("gfhinib", m)
}
