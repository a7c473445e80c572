package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// The exact Q4_K/Q5_K four-row kernels' "x4P" variants (MatMul with four
// or more activation rows) read the rows in a compact prepared layout,
// built once per MatMul call by q4mmPrepQ8K: per Q8_K block, the 256
// quants permuted into lane order (as the one-row prepared layout), d,
// the 16 bsums, and padding to 320 bytes, so that every block and every
// vector load stays 64-byte aligned. The plain x4 kernels permute each of
// the four rows' quants for every weight block (a third of their vector
// work on the VNNI targets); the prepared rows are read as they are, and
// four of them take 10% more room than four Q8_K rows, not twice (the
// one-row layout's offset words, which Q4_K/Q5_K never read, are left
// out). Must match kernelkit's prep45 constants.
const (
	q4mmPrepQs    = 0
	q4mmPrepD     = 256
	q4mmPrepBsums = 260
	q4mmPrepBlock = 320
)

// q4mmGenPrep emits q4mmPrepQ8K<suffix>(a *byte, nb int, dst *byte): the
// compact preparation of one Q8_K row of nb blocks, padding zeroed. AVX2
// only (VPERMD + VPSHUFB), so one function serves every level of a plugin.
func q4mmGenPrep(t *target) {
	name := "q4mmPrepQ8K" + t.suffix
	TEXT(name, NOSPLIT, "func(a *byte, nb int, dst *byte)")
	Pragma("noescape")
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	dp := Load(Param("dst"), GP64())
	pidx, pctl, z := YMM(), YMM(), YMM()
	VMOVDQU(t.permDwords(), pidx)
	VMOVDQU(t.permLane(), pctl)
	VPXOR(z, z, z)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	for i := 0; i < 8; i++ {
		y := YMM()
		VPERMD(Mem{Base: ap, Disp: q8KQs + 32*i}, pidx, y)
		VPSHUFB(pctl, y, y)
		VMOVDQU(y, Mem{Base: dp, Disp: q4mmPrepQs + 32*i})
	}
	// The padding first: its store overlaps the bsums' last four bytes.
	VMOVDQU(z, Mem{Base: dp, Disp: q4mmPrepBlock - 32})
	b := YMM()
	VMOVDQU(Mem{Base: ap, Disp: q8KBsums}, b)
	VMOVDQU(b, Mem{Base: dp, Disp: q4mmPrepBsums})
	d := GP32()
	MOVL(Mem{Base: ap}, d)
	MOVL(d, Mem{Base: dp, Disp: q4mmPrepD})
	ADDQ(U32(q8KSize), ap)
	ADDQ(U32(q4mmPrepBlock), dp)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER()
	RET()
}
