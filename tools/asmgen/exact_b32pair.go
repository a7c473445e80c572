package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The two-halves layout of the exact 32-element block kernels (see
// exact_b32.go): two blocks, of two rows (the eight-row kernel) or of one
// row (blocks i and i+4 of the one-row kernel), share a ymm, one 128-bit
// half each; a half-block of 16 quants is one VPDPBUSD (or VPMADDUBSW), so
// one vector adds up two blocks, and the horizontal-add tree that turns the
// per-block lanes into sums is three VPHADDD for eight blocks.

// pair loads the 16 bytes at ma and at mb as one ymm: [ma | mb].
func (k *b32k) pair(ma, mb Mem) VecVirtual {
	x, y := XMM(), YMM()
	k.t.mov(ma, x)
	if k.t.evex() {
		VINSERTI32X4(U8(1), mb, x.AsY(), y)
	} else {
		VINSERTI128(U8(1), mb, x.AsY(), y)
	}
	return y
}

// pairPrep is an activation block for the two-row layout: its first and
// second 16 quants in both 128-bit halves, and the offset's part of the
// integer sum (see actPrep), which is the same for both halves.
type pairPrep struct {
	lo, hi VecVirtual
	corr   VecVirtual
}

func (k *b32k) prepPair(a Mem) pairPrep {
	p := pairPrep{lo: YMM(), hi: YMM()}
	q := k.ty.actQ()
	k.t.bcast16(a.Offset(q), p.lo)
	k.t.bcast16(a.Offset(q+16), p.hi)
	return k.prepCorr(p)
}

// prepPair2 is prepPair for two activation blocks, a for the low halves
// and b for the high ones (the one-row kernel's two blocks per vector).
func (k *b32k) prepPair2(a, b Mem) pairPrep {
	q := k.ty.actQ()
	return k.prepCorr(pairPrep{lo: k.pair(a.Offset(q), b.Offset(q)), hi: k.pair(a.Offset(q+16), b.Offset(q+16))})
}

func (k *b32k) prepCorr(p pairPrep) pairPrep {
	t := k.t
	switch {
	case k.ty.min:
		// Unsigned codes without an offset: nothing to correct.
	case t.vnni:
		o := k.off
		if k.ty.signed() {
			o = k.x80
		}
		c := YMM()
		t.zero(c)
		vnniOp("VPDPBUSD", p.lo, o, c)
		vnniOp("VPDPBUSD", p.hi, o, c)
		p.corr = YMM()
		t.zero(p.corr)
		VPSUBD(c, p.corr, p.corr)
	case !k.ty.signed():
		// Two VPMADDUBSW of codes <= 24 and one of the offset stay far
		// from int16 saturation.
		c, h := YMM(), YMM()
		VPMADDUBSW(p.lo, k.off, c)
		VPMADDUBSW(p.hi, k.off, h)
		VPADDW(h, c, c)
		p.corr = c
	}
	return p
}

// pairCodes returns the first and second 16 unsigned codes of weight
// blocks wa and wb as [wa's | wb's] ymm pairs (Q8_0: the signed quants).
func (k *b32k) pairCodes(wa, wb Mem) (lo, hi VecVirtual) {
	t := k.t
	if k.ty == b32Q8_0 {
		return k.pair(wa.Offset(2), wb.Offset(2)), k.pair(wa.Offset(18), wb.Offset(18))
	}
	q := k.pair(wa.Offset(k.ty.qoff), wb.Offset(k.ty.qoff))
	lo, hi = YMM(), YMM()
	VPSRLW(U8(4), q, hi)
	t.and(k.c0F, q, lo)
	t.and(k.c0F, hi, hi)
	switch {
	case k.ty.q5():
		k.q5Pair(wa.Offset(k.ty.qhoff), wb.Offset(k.ty.qhoff), lo, hi)
	case k.ty == b32MXFP4 || k.ty.lut != nil:
		VPSHUFB(lo, k.table, lo)
		VPSHUFB(hi, k.table, hi)
	}
	return lo, hi
}

// q5Pair adds 16 to the codes whose bit is set in the qh words at ha (the
// low halves of lo, hi) and hb (their high halves).
func (k *b32k) q5Pair(ha, hb Mem, lo, hi VecVirtual) {
	if k.t.evex() {
		// Byte masks: bits 0..15 of a's qh, then of b's (for lo); bits
		// 16..31 of each (for hi). Built in general registers, which are
		// idle here, rather than with mask-register shuffles.
		a, b, l, c := GP32(), GP32(), GP32(), GP32()
		MOVL(ha, a)
		MOVL(hb, b)
		MOVWLZX(a.As16(), l)
		MOVL(b, c)
		SHLL(U8(16), c)
		ORL(c, l)
		SHRL(U8(16), a)
		ANDL(U32(0xffff0000), b)
		ORL(a, b)
		ml, mh := K(), K()
		KMOVD(l, ml)
		KMOVD(b, mh)
		VPADDB(k.c10, lo, ml, lo)
		VPADDB(k.c10, hi, mh, hi)
		return
	}
	// qh of a in the low half, of b in the high one; byte j/8 over element
	// j, an OR with every bit but the element's own is all-ones exactly
	// where that bit is set.
	x, h := XMM(), YMM()
	VMOVD(ha, x)
	VPINSRD(U8(1), hb, x, x)
	VPBROADCASTQ(x, h) // every qword: qh of a, then of b
	for i, v := range []VecVirtual{lo, hi} {
		s := YMM()
		VPSHUFB(constData(fmtB32Spread(i), b32Spread(i)), h, s)
		VPOR(k.bits, s, s)
		VPCMPEQB(constVec(0xffffffff), s, s) // from memory: AVX2 is short of registers here
		VPAND(k.c10, s, s)
		VPOR(s, v, v)
	}
}

func fmtB32Spread(i int) string { return []string{"b32q5lo", "b32q5hi"}[i] }

// b32Spread is the VPSHUFB control that puts, in each 128-bit half whose
// qwords are [qh_a, qh_b] (low half: a's dword at byte 0; high half: b's
// at byte 4), the qh byte of element j over element j: bytes 0,1 (first
// 16 elements, i = 0) or 2,3 (i = 1), of dword 0 in the low half and of
// dword 1 in the high half.
func b32Spread(i int) []byte {
	var b []byte
	for half := 0; half < 2; half++ {
		for j := 0; j < 16; j++ {
			b = append(b, byte(4*half+2*i+j/8))
		}
	}
	return b
}

// pairDot returns [a's | b's] int32 lanes: each half adds up to its row's
// sumi.
func (k *b32k) pairDot(lo, hi VecVirtual, p pairPrep) VecVirtual {
	t := k.t
	if k.ty.signed() {
		if t.vnni {
			if k.ty.lut == nil { // a looked-up table is biased already (newB32k)
				k.xor(k.x80, lo, lo)
				k.xor(k.x80, hi, hi)
			}
			acc := YMM()
			t.copyv(p.corr, acc)
			vnniOp("VPDPBUSD", p.lo, lo, acc)
			vnniOp("VPDPBUSD", p.hi, hi, acc)
			return acc
		}
		var r [2]VecVirtual
		for i, x := range []VecVirtual{lo, hi} {
			y := []VecVirtual{p.lo, p.hi}[i]
			if k.ty.lut != nil {
				// The table's values are never -128 but an activation
				// may be: move the sign onto the weight and take |a| as
				// the unsigned side (128 fits), exact for every byte.
				ay := YMM()
				VPSIGNB(y, x, x)
				VPABSB(y, ay)
				VPMADDUBSW(x, ay, x)
				VPMADDWD(k.ones, x, x)
				r[i] = x
				continue
			}
			sy := YMM()
			VPSIGNB(x, y, sy)
			VPSIGNB(x, x, x)
			VPMADDUBSW(sy, x, x)
			VPMADDWD(k.ones, x, x)
			r[i] = x
		}
		VPADDD(r[1], r[0], r[0])
		return r[0]
	}
	if t.vnni {
		acc := YMM()
		if p.corr == nil {
			t.zero(acc)
		} else {
			t.copyv(p.corr, acc)
		}
		vnniOp("VPDPBUSD", p.lo, lo, acc)
		vnniOp("VPDPBUSD", p.hi, hi, acc)
		return acc
	}
	VPMADDUBSW(p.lo, lo, lo)
	VPMADDUBSW(p.hi, hi, hi)
	VPADDW(hi, lo, lo)
	if p.corr != nil {
		VPSUBW(p.corr, lo, lo)
	}
	VPMADDWD(k.ones, lo, lo)
	return lo
}

// genB32Rows8 emits dot<T>r8<suffix>(w *byte, wstride int, a *byte, nb int,
// out *float32): the eight weight rows at w, w+wstride, ... times the
// activation row a into out[0:8]. Rows r and r+4 share a ymm (one 128-bit
// half each) and one VPDPBUSD per half-block, so a block's four pair
// vectors reduce to the eight rows' sums in three horizontal adds.
func genB32Rows8(t *target, ty *b32type) {
	name := "dot" + ty.name + "r8" + t.suffix
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
	k := newB32k(t, ty)
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
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	// The eight rows are one contiguous span, and so are the next call's:
	// reading eight rows side by side from DRAM is much slower than one
	// sequential stream (measured, Zen 4), so each block fetches its share
	// of the next span, in order, while this one is read from the cache.
	// PREFETCHT1 (into L2) measured faster than PREFETCHT0 here.
	step := 8 * ty.wsize
	for off := 0; off < step; off += 64 {
		PREFETCHT1(Mem{Base: pf, Disp: off})
	}
	ADDQ(U32(step), pf)
	p := k.prepPair(Mem{Base: ap})
	dot := func(r int) VecVirtual {
		lo, hi := k.pairCodes(row(r), row(r+4))
		return k.pairDot(lo, hi, p)
	}
	// In this order only two pair sums are live at a time.
	h01 := k.hadd2(dot(0), dot(1))
	isum := k.hadd2(h01, k.hadd2(dot(2), dot(3)))
	da := YMM()
	VPBROADCASTW(Mem{Base: ap}, da.AsX())
	VCVTPH2PS(da.AsX(), da)
	if ty.min {
		k.sa = YMM()
		VPBROADCASTW(Mem{Base: ap, Disp: 2}, k.sa.AsX())
		VCVTPH2PS(k.sa.AsX(), k.sa)
	}
	prod := k.products(8, isum, row, da, nil)
	VADDPS(prod, acc, acc)
	ADDQ(U32(ty.wsize), wp)
	ADDQ(U32(ty.wsize), wp4)
	ADDQ(U32(ty.actSize()), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	out := Load(Param("out"), GP64())
	VMOVUPS(acc, Mem{Base: out})
	VZEROUPPER()
	RET()
}
