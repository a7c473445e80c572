package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ4_XS · Q8_K, bit for bit ggml_vec_dot_iq4_xs_q8_K_generic (core/quant
// vecDotIQ4XS). The reference adds, per 32-element group in order,
// sumf += (d4d8*float(ls-32)) * float(sumi), d4d8 = fp16(d)*d8 once per
// super-block. A super-block's eight groups are eight IQ4_NL blocks as far
// as the integers go (the same table, 16 packed bytes per group), so the
// one-row kernel is exact_b32.go's one-row loop over the groups: groups g
// and g+4 share a ymm, a horizontal-add tree gives the eight group sums in
// lane order, the eight group scales are made lane-wise (iq4xsScales), and
// eight dependent scalar adds run in group order.

// b32IQ4XS describes one group of an IQ4_XS super-block to the b32 code:
// its quants at 8 + 16*g of the block (wm below steps 16 bytes a group),
// looked up in IQ4_NL's table.
var b32IQ4XS = &b32type{name: "IQ4_XS", wsize: 16, qoff: 8, lut: b32IQ4NL.lut}

const iq4xsSize = 136

// iq4xsScales returns the eight groups' d4d8*float(ls-32) of the IQ4_XS
// block at w (d4d8 = fp16 d times the Q8_K d at a), lane g for group g.
//
// Every dword g is built from one qword holding the block's first eight
// bytes (d, scales_h, scales_l): byte 0 is scales_l[g/2], bytes 1-2 are
// scales_h, so ls = (v >> 4*(g%2)) & 15 | ((v >> (8+2g)) & 3) << 4.
func iq4xsScales(t *target, w, a Mem) VecVirtual {
	q, v, h := YMM(), YMM(), YMM()
	VPBROADCASTQ(w, q)
	var ctl []byte
	for g := 0; g < 8; g++ {
		ctl = append(ctl, byte(4+g/2), 2, 3, 0x80)
	}
	VPSHUFB(constData("iq4xsctl", ctl), q, q)
	var lo, hi []byte
	for g := 0; g < 8; g++ {
		lo = append(lo, byte(4*(g%2)), 0, 0, 0)
		hi = append(hi, byte(8+2*g), 0, 0, 0)
	}
	VPSRLVD(constData("iq4xslo", lo), q, v)
	VPSRLVD(constData("iq4xshi", hi), q, h)
	t.and(constVec(0x0f), v, v)
	t.and(constVec(0x03), h, h)
	VPSLLD(U8(4), h, h)
	t.or(h, v, v)
	VPSUBD(constVec(32), v, v)
	VCVTDQ2PS(v, v)
	d := XMM()
	VPBROADCASTW(w, d)
	VCVTPH2PS(d, d)
	VMULSS(a, d, d)
	VBROADCASTSS(d, h)
	VMULPS(h, v, v)
	return v
}

// genIQ4XSRow emits dotIQ4_XS<suffix>(w, a *byte, nb int) float32.
func genIQ4XSRow(t *target) {
	name := "dotIQ4_XS" + t.suffix
	TEXT(name, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k := newB32k(t, b32IQ4XS)
	sum := XMM()
	VXORPS(sum, sum, sum)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	wm := func(g int) Mem { return Mem{Base: wp, Disp: 16 * g} }
	am := func(g int) Mem { return Mem{Base: ap, Disp: 2 + 32*g} }
	Label("loop" + name)
	dot := func(g int) VecVirtual {
		lo, hi := k.pairCodes(wm(g), wm(g+4))
		return k.pairDot(lo, hi, k.prepPair2(am(g), am(g+4)))
	}
	h01 := k.hadd2(dot(0), dot(1))
	isum := k.hadd2(h01, k.hadd2(dot(2), dot(3)))
	f := isum
	VCVTDQ2PS(isum, f)
	VMULPS(iq4xsScales(t, Mem{Base: wp}, Mem{Base: ap}), f, f)
	k.addLanes(8, f, sum)
	ADDQ(U32(iq4xsSize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	Store(sum, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// genIQ4XSRows8 emits dotIQ4_XSr8<suffix>(w *byte, wstride int, a *byte,
// nb int, out *float32): eight IQ4_XS rows times one Q8_K row, each bit
// for bit dotIQ4_XS. As in exact_b32pair.go's eight-row kernel, lane r of
// one ymm is row r's sumf: per group g the eight rows' group sums come out
// of the two-halves layout in row order, and one VMULPS by the eight rows'
// scales of g (made from each row's scales_l and scales_h dwords, gathered
// once per super-block) and one VADDPS advance the eight chains in the
// reference's group order.
func genIQ4XSRows8(t *target) {
	name := "dotIQ4_XSr8" + t.suffix
	TEXT(name, NOSPLIT, "func(w *byte, wstride int, a *byte, nb int, out *float32)")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ws := Load(Param("wstride"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	ws3, wp4, pf := GP64(), GP64(), GP64()
	LEAQ(Mem{Base: ws, Index: ws, Scale: 2}, ws3)
	LEAQ(Mem{Base: wp, Index: ws, Scale: 4}, wp4)
	LEAQ(Mem{Base: wp4, Index: ws, Scale: 4}, pf)
	k := newB32k(t, b32IQ4XS)
	acc := YMM()
	t.zero(acc)
	row := func(r int) Mem {
		base := wp
		if r >= 4 {
			base, r = wp4, r-4
		}
		switch r {
		case 0:
			return Mem{Base: base}
		case 3:
			return Mem{Base: base, Index: ws3, Scale: 1}
		}
		return Mem{Base: base, Index: ws, Scale: uint8(r)}
	}
	// AVX2 has sixteen registers: the per-super-block scale vectors wait
	// on the stack there.
	var spill Mem
	if !t.evex() {
		spill = AllocLocal(96)
	}
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	step := 8 * iq4xsSize
	for off := 0; off < step; off += 64 {
		PREFETCHT1(Mem{Base: pf, Disp: off})
	}
	ADDQ(U32(step), pf)

	// d4d8 of each row, and its scales_l (sl) and scales_h (sh) dwords.
	d := k.halves(8, row)
	y := YMM()
	VBROADCASTSS(Mem{Base: ap}, y)
	VMULPS(y, d, d)
	dword := func(off int) VecVirtual {
		lo, hi, v := XMM(), XMM(), YMM()
		VMOVD(row(0).Offset(off), lo)
		VMOVD(row(4).Offset(off), hi)
		for r := 1; r < 4; r++ {
			VPINSRD(U8(r), row(r).Offset(off), lo, lo)
			VPINSRD(U8(r), row(r+4).Offset(off), hi, hi)
		}
		if t.evex() {
			VINSERTI32X4(U8(1), hi, lo.AsY(), v)
		} else {
			VINSERTI128(U8(1), hi, lo.AsY(), v)
		}
		return v
	}
	sl, sh := dword(4), dword(0)
	VPSRLD(U8(16), sh, sh) // scales_h, the high half of the first dword
	scales := [3]VecVirtual{d, sl, sh}
	if !t.evex() {
		for i, v := range scales {
			VMOVDQU(v, spill.Offset(32*i))
		}
	}
	for g := 0; g < 8; g++ {
		p := k.prepPair(Mem{Base: ap, Disp: 2 + 32*g})
		dot := func(r int) VecVirtual {
			lo, hi := k.pairCodes(row(r).Offset(16*g), row(r+4).Offset(16*g))
			return k.pairDot(lo, hi, p)
		}
		h01 := k.hadd2(dot(0), dot(1))
		isum := k.hadd2(h01, k.hadd2(dot(2), dot(3)))
		f := isum
		VCVTDQ2PS(isum, f)
		var dv, lv, hv Op = scales[0], scales[1], scales[2]
		if !t.evex() {
			dv, lv, hv = spill, spill.Offset(32), spill.Offset(64)
		}
		ls, h := YMM(), YMM()
		if !t.evex() {
			VMOVDQU(lv.(Mem), ls)
			VMOVDQU(hv.(Mem), h)
			lv, hv = ls, h
		}
		if g > 0 {
			VPSRLD(U8(4*g), lv, ls)
			VPSRLD(U8(2*g), hv, h)
			lv, hv = ls, h
		}
		t.and(constVec(0x0f), lv, ls)
		t.and(constVec(0x03), hv, h)
		VPSLLD(U8(4), h, h)
		t.or(h, ls, ls)
		VPSUBD(constVec(32), ls, ls)
		VCVTDQ2PS(ls, ls)
		VMULPS(dv, ls, ls)
		VMULPS(ls, f, f)
		VADDPS(f, acc, acc)
	}
	ADDQ(U32(iq4xsSize), wp)
	ADDQ(U32(iq4xsSize), wp4)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	out := Load(Param("out"), GP64())
	VMOVUPS(acc, Mem{Base: out})
	VZEROUPPER()
	RET()
}
