package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The exact Q4_K/Q5_K four-row kernels' "x4P" variants (MatMul with four
// or more activation rows) read their four rows prepared once per MatMul
// call by q4mmPrepQ8K, interleaved per block into a group of 1152 bytes:
// the four rows' 256 quants, each permuted into lane order as the one-row
// prepared layout (q45prep.go); the four d; the four rows' eight bsum
// pairs bsums[2k]+bsums[2k+1] as words (rows 0 2 1 3); padding to a multiple of 64, so
// every block and vector load stays aligned. The plain x4 kernels permute
// each row's quants for every weight block (a third of their vector work
// on the VNNI targets); these read them as they are. The mins need
// sum_k mins[k]*pairs[k] per row (the reference's sum over the sixteen
// bsums, regrouped: integers, exact), two VPMADDWD for the four rows and a
// short reduction, and the four d are one load. The group is a little
// smaller than four Q8_K blocks. Must match kernelkit's prep45 constants.
const (
	q4mmPrepD     = 1024
	q4mmPrepPairs = 1040
	q4mmPrepBlock = 1152
)

// q4mmPairSlot is where in a group each row's pairs are: rows 0 and 2,
// then 1 and 3, so that the reduction of the products (q4mmMins) ends with
// the rows in order.
var q4mmPairSlot = [4]int{0, 2, 1, 3}

// q4mmActs returns the four rows' addresses in a group at ap.
func q4mmActs(ap Register) []Mem {
	var a []Mem
	for k := range 4 {
		a = append(a, Mem{Base: ap, Disp: 256 * k})
	}
	return a
}

// q4mmD returns where row k's d is: acts[k]'s, or in a compact group.
func (x *xk) q4mmD(acts []Mem, k int) Mem {
	if x.compact {
		return Mem{Base: acts[0].Base, Disp: q4mmPrepD + 4*k}
	}
	return acts[k].Offset(x.q45pD())
}

// q4mmMins returns the four rows' sum_k mins[k]*pairs[k] (an xmm, row r
// in dword r) from the block's mins: gs's, or bytes 8..15 of each lane of
// scb.
func (x *xk) q4mmMins(gs *gprScale, scb VecVirtual) VecVirtual {
	// mw: the eight mins as words, in both 128-bit lanes.
	var dup []byte
	for range 2 {
		for k := range 8 {
			if gs != nil {
				dup = append(dup, byte(k), 0x80)
			} else {
				dup = append(dup, byte(8+k), 0x80)
			}
		}
	}
	mw := YMM()
	if gs != nil {
		xm := XMM()
		VMOVQ(gs.m, xm)
		VPBROADCASTQ(xm, mw)
		VPSHUFB(constData("q4mmmdupq", dup), mw, mw)
	} else {
		VPSHUFB(constData("q4mmmdup", dup), scb.AsY(), mw)
	}
	a := x.acts[0]
	p02, p13 := YMM(), YMM()
	VPMADDWD(a.Offset(q4mmPrepPairs), mw, p02) // row 0 in lane 0, row 2 in lane 1
	VPMADDWD(a.Offset(q4mmPrepPairs+32), mw, p13)
	lo, hi := YMM(), YMM()
	VPUNPCKLQDQ(p13, p02, lo)
	VPUNPCKHQDQ(p13, p02, hi)
	VPADDD(hi, lo, lo) // lane 0: rows 0 0 1 1, lane 1: rows 2 2 3 3
	sw := YMM()
	VPSHUFD(U8(0xb1), lo, sw)
	VPADDD(sw, lo, lo)
	h := x.extract128(lo)
	// Rows 0 1 2 3. (VSHUFPS, not VPBLENDD, which has no EVEX form for
	// registers 16..31.)
	VSHUFPS(U8(0x88), h, lo.AsX(), h)
	return h
}

// q4mmFinishMins does sumf -= dmin*float(sumi) for the four rows of one
// compact group: lane k of sumf is row k's.
func (x *xk) q4mmFinishMins(a kmins) {
	sumi := a.sumi
	VCVTDQ2PS(sumi, sumi)
	yd := XMM()
	VMOVUPS(x.acts[0].Offset(q4mmPrepD), yd)
	x.subMins(sumi, yd, a.hd)
}

// q4mmGenPrep emits q4mmPrepQ8K<suffix>(a *byte, astride, nb int, dst
// *byte): the compact group of the four Q8_K rows of nb blocks at a,
// astride bytes apart, padding zeroed. AVX2 only (VPERMD + VPSHUFB), so
// one function serves every level of a plugin.
func q4mmGenPrep(t *target) {
	name := "q4mmPrepQ8K" + t.suffix
	TEXT(name, NOSPLIT, "func(a *byte, astride, nb int, dst *byte)")
	Pragma("noescape")
	ap := Load(Param("a"), GP64())
	s := Load(Param("astride"), GP64())
	nb := Load(Param("nb"), GP64())
	dp := Load(Param("dst"), GP64())
	s3 := GP64()
	LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
	rows := []Mem{{Base: ap}, {Base: ap, Index: s, Scale: 1}, {Base: ap, Index: s, Scale: 2}, {Base: ap, Index: s3, Scale: 1}}
	pidx, pctl, z, ones := YMM(), YMM(), YMM(), YMM()
	VMOVDQU(t.permDwords(), pidx)
	VMOVDQU(t.permLane(), pctl)
	VPXOR(z, z, z)
	VPBROADCASTD(constU32(0x00010001), ones)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	for r, a := range rows {
		for i := 0; i < 8; i++ {
			y := YMM()
			VPERMD(a.Offset(q8KQs+32*i), pidx, y)
			VPSHUFB(pctl, y, y)
			VMOVDQU(y, Mem{Base: dp, Disp: 256*r + 32*i})
		}
		d := GP32()
		MOVL(a, d)
		MOVL(d, Mem{Base: dp, Disp: q4mmPrepD + 4*r})
		p := YMM()
		VPMADDWD(a.Offset(q8KBsums), ones, p) // the pairs, as dwords
		h := XMM()
		VEXTRACTI128(U8(1), p, h)
		VPACKSSDW(h, p.AsX(), h) // |pair| <= 4096: exact
		VMOVDQU(h, Mem{Base: dp, Disp: q4mmPrepPairs + 16*q4mmPairSlot[r]})
	}
	for o := q4mmPrepPairs + 64; o < q4mmPrepBlock; o += 32 {
		VMOVDQU(z, Mem{Base: dp, Disp: o})
	}
	ADDQ(U32(q8KSize), ap)
	ADDQ(U32(q4mmPrepBlock), dp)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER()
	RET()
}
