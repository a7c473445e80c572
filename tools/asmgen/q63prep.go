package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// The prepared activation layout of the exact Q3_K/Q6_K kernels (their
// "P" variants), built by kernelkit (prep.go) once per activation row: per
// 256-element Q8_K block, the 256 quants already permuted into the
// kernels' lane order, then the quants' offset times each permuted pair
// (the 128 words VPMADDUBSW(offset, y) gives), then d. The weights are
// still permuted in the kernel; the activations, read once per weight row,
// no longer are: VPMADDUBSW, VPSUBW and VPDPWSSD per vector and row, all
// three from memory, instead of five operations. Must match kernelkit's
// prepBlock/prepOff/prepD.
const (
	q63PrepOff   = 256
	q63PrepD     = 512
	q63PrepBlock = 576
)

// q63Kinds are the variants genQ3KExact and genQ6KExact emit: one and four
// activation rows on Q8_K rows, one on a prepared row, and that one as a
// tile kernel (lrDot*T: its float lanes carried in and out through acc,
// for rows too long for L1 that kernelkit runs a tile of blocks at a time). Four prepared rows
// (twice the bytes of four Q8_K rows: 37 KiB at 4096 columns) no longer
// fit L1 with the weights, and measured slower than the Q8_K kernel.
var q63Kinds = []struct {
	prep, tile bool
	m          int
}{{false, false, 1}, {false, false, 4}, {true, false, 1}, {true, true, 1}}

// q63GenPrep emits q63PrepQ8K<suffix>(a *byte, nb int, dst *byte, off int):
// kernelkit's row preparation for one Q8_K row of nb blocks with the quant
// offset off (a byte). AVX2 only (VPERMD + VPSHUFB), so one function
// serves every level of a plugin; it runs once per activation row.
func q63GenPrep(t *target) {
	name := "q63PrepQ8K" + t.suffix
	TEXT(name, NOSPLIT, "func(a *byte, nb int, dst *byte, off int)")
	Pragma("noescape")
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	dp := Load(Param("dst"), GP64())
	off := Load(Param("off"), GP64())
	coff := YMM()
	MOVQ(off, coff.AsX())
	VPBROADCASTB(coff.AsX(), coff)
	pidx, pctl := YMM(), YMM()
	VMOVDQU(t.permDwords(), pidx)
	VMOVDQU(t.permLane(), pctl)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	for i := 0; i < 8; i++ {
		y, o := YMM(), YMM()
		VPERMD(Mem{Base: ap, Disp: q8KQs + 32*i}, pidx, y)
		VPSHUFB(pctl, y, y)
		VMOVDQU(y, Mem{Base: dp, Disp: 32 * i})
		VPMADDUBSW(y, coff, o)
		VMOVDQU(o, Mem{Base: dp, Disp: q63PrepOff + 32*i})
	}
	d := GP32()
	MOVL(Mem{Base: ap}, d)
	MOVL(d, Mem{Base: dp, Disp: q63PrepD})
	ADDQ(U32(q8KSize), ap)
	ADDQ(U32(q63PrepBlock), dp)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER()
	RET()
}
