package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Exact kernels for the 32-element block types against Q8_0 activations
// (Q8_0, Q4_0, Q5_0, MXFP4). The reference (ggml's *_generic) computes an
// integer sum per block and then, per block and in block order,
// sumf += float(sumi)*scale, rounding every product and every sum. Integers
// add exactly in any order, so a block's sumi may come from any lane
// grouping; the float part is redone exactly:
//
//   - one row (dot<T><suffix>): eight blocks' int32 lane vectors are reduced
//     at once by a horizontal-add tree into one vector of eight sums, their
//     eight scale products are computed lane-wise (IEEE multiplication is the
//     same in a lane as in a scalar), and then eight dependent scalar adds
//     run in block order. That add chain bounds one row to a block per add
//     latency;
//   - eight rows (dot<T>r8<suffix>): lane r of one ymm is row r's sumf, so
//     one VADDPS per block advances eight independent chains, and every
//     activation block is loaded and prepared once for the eight rows.
//
// Each type's scale product, in the reference's order:
//
//	Q8_0, Q5_0:  float(sumi) * (dw*da)
//	Q4_0:        (float(sumi)*dw) * da
//	MXFP4:       float(sumi) * (da*e8m0half(e))

// b32type is one block type.
type b32type struct {
	name  string
	wsize int    // bytes per weight block
	qoff  int    // offset of the quants in a weight block
	off   uint32 // the unsigned codes' offset (Q8_0: none, the quants are signed)
}

var (
	b32Q8_0  = &b32type{name: "Q8_0", wsize: 34, qoff: 2}
	b32Q4_0  = &b32type{name: "Q4_0", wsize: 18, qoff: 2, off: 8}
	b32Q5_0  = &b32type{name: "Q5_0", wsize: 22, qoff: 6, off: 16}
	b32MXFP4 = &b32type{name: "MXFP4", wsize: 17, qoff: 1, off: 12}
)

// genExactB32 emits both kernels of ty for t.
func genExactB32(t *target, ty *b32type) {
	genB32Row(t, ty)
	genB32Rows8(t, ty)
}

// b32k holds one kernel's loop-invariant constants.
type b32k struct {
	t  *target
	ty *b32type

	c0F, off, ones, x80 VecVirtual
	c10, bits           VecVirtual // Q5_0
	table               VecVirtual // MXFP4
	c2, c800000         VecVirtual // MXFP4's scale
}

func newB32k(t *target, ty *b32type) *b32k {
	k := &b32k{t: t, ty: ty}
	if ty == b32Q8_0 {
		if t.vnni {
			k.x80 = YMM()
			VPBROADCASTD(constU32(0x80808080), k.x80)
		} else {
			k.ones = YMM()
			VPBROADCASTD(constU32(0x00010001), k.ones)
		}
		return k
	}
	k.c0F, k.off = YMM(), YMM()
	VPBROADCASTD(constU32(0x0f0f0f0f), k.c0F)
	VPBROADCASTD(constU32(ty.off*0x01010101), k.off)
	if !t.vnni {
		k.ones = YMM()
		VPBROADCASTD(constU32(0x00010001), k.ones)
	}
	switch ty {
	case b32Q5_0:
		k.c10 = YMM()
		VPBROADCASTD(constU32(0x10101010), k.c10)
		if !t.evex() {
			k.bits = YMM()
			VPBROADCASTQ(constData("b32q5bits", []byte{0xfe, 0xfd, 0xfb, 0xf7, 0xef, 0xdf, 0xbf, 0x7f}), k.bits)
		}
	case b32MXFP4:
		k.table = YMM()
		t.bcast16(constData("b32mxfp4lut", []byte{12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0}), k.table)
		k.c2, k.c800000 = YMM(), YMM()
		VPBROADCASTD(constU32(2), k.c2)
		VPBROADCASTD(constU32(0x00800000), k.c800000)
	}
	return k
}

func (k *b32k) ld32(m Mem, dst Op) {
	if k.t.evex() {
		VMOVDQU64(m, dst)
	} else {
		VMOVDQU(m, dst)
	}
}

func (k *b32k) xor(src2, src1, dst Op) {
	if k.t.evex() {
		VPXORD(src2, src1, dst)
	} else {
		VPXOR(src2, src1, dst)
	}
}

// codes returns the unsigned codes (code+off = the signed value) of the
// weight block at w as 32 bytes in element order.
func (k *b32k) codes(w Mem) VecVirtual {
	t := k.t
	q, hi := XMM(), XMM()
	t.mov(w.Offset(k.ty.qoff), q)
	VPSRLW(U8(4), q, hi)
	u := YMM()
	if t.evex() {
		VINSERTI32X4(U8(1), hi, q.AsY(), u)
	} else {
		VINSERTI128(U8(1), hi, q.AsY(), u)
	}
	t.and(k.c0F, u, u)
	switch k.ty {
	case b32Q5_0:
		if t.evex() {
			// qh as a byte mask: add 16 where its bit is set.
			m := K()
			KMOVD(w.Offset(2), m)
			VPADDB(k.c10, u, m, u)
		} else {
			// Byte k of qh over elements 8k..8k+7; an OR with every bit but
			// the element's own is all-ones exactly where that bit is set.
			h, all1 := YMM(), YMM()
			VPBROADCASTD(w.Offset(2), h)
			VPSHUFB(constData("b32q5spread", []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
				2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}), h, h)
			VPOR(k.bits, h, h)
			VPCMPEQB(all1, all1, all1)
			VPCMPEQB(all1, h, h)
			VPAND(k.c10, h, h)
			VPOR(h, u, u)
		}
	case b32MXFP4:
		VPSHUFB(u, k.table, u) // doubled E2M1 value + 12
	}
	return u
}

// actPrep is what every row shares of one activation block: its quants
// and the offset's part of the integer sum.
type actPrep struct {
	y    Op         // the 32 signed quants (register or memory)
	corr VecVirtual // VNNI: -off*y per lane; else off*y as int16 pairs (nil for Q8_0)
}

func (k *b32k) prep(a Mem, reg bool) actPrep {
	t := k.t
	p := actPrep{y: a.Offset(2)}
	if reg || (k.ty == b32Q8_0 && !t.vnni) {
		y := YMM()
		k.ld32(a.Offset(2), y)
		p.y = y
	}
	switch {
	case t.vnni:
		// Q8_0 runs its signed weights as x+128: subtract 128*y.
		o := k.off
		if k.ty == b32Q8_0 {
			o = k.x80
		}
		c := YMM()
		t.zero(c)
		vnniOp("VPDPBUSD", p.y, o, c)
		p.corr = YMM()
		t.zero(p.corr)
		VPSUBD(c, p.corr, p.corr)
	case k.ty != b32Q8_0:
		p.corr = YMM()
		VPMADDUBSW(p.y, k.off, p.corr)
	}
	return p
}

// rowSum returns the weight block at w times the activation block as eight
// int32 lanes that add up to the block's sumi.
func (k *b32k) rowSum(w Mem, p actPrep) VecVirtual {
	t := k.t
	if k.ty == b32Q8_0 {
		x := YMM()
		k.ld32(w.Offset(2), x)
		if t.vnni {
			k.xor(k.x80, x, x)
			acc := YMM()
			t.copyv(p.corr, acc)
			vnniOp("VPDPBUSD", p.y, x, acc)
			return acc
		}
		// ggml's sign trick: |x| times y with x's sign; exact since no
		// activation is -128 (the Q8_0 quantizer scales to ±127).
		ax, sy := YMM(), YMM()
		VPSIGNB(x, x, ax)
		VPSIGNB(x, p.y, sy)
		VPMADDUBSW(sy, ax, ax)
		VPMADDWD(k.ones, ax, ax)
		return ax
	}
	u := k.codes(w)
	if t.vnni {
		acc := YMM()
		t.copyv(p.corr, acc)
		vnniOp("VPDPBUSD", p.y, u, acc)
		return acc
	}
	// Both VPMADDUBSW stay far from int16 saturation (codes <= 31).
	VPMADDUBSW(p.y, u, u)
	VPSUBW(p.corr, u, u)
	VPMADDWD(k.ones, u, u)
	return u
}

// hadd2 is VPHADDD(a, b): per 128-bit lane, a's pair sums then b's.
// VPHADDD has no EVEX form, so on the AVX-512 targets (whose allocator may
// hand out registers 16..31) it is spelled out as two shuffles and an add.
func (k *b32k) hadd2(a, b VecVirtual) VecVirtual {
	d := YMM()
	if !k.t.evex() {
		VPHADDD(b, a, d)
		return d
	}
	odd := YMM()
	VSHUFPS(U8(0x88), b, a, d)
	VSHUFPS(U8(0xdd), b, a, odd)
	VPADDD(odd, d, d)
	return d
}

// fold4 adds the two 128-bit halves of v.
func (k *b32k) fold4(v VecVirtual) VecVirtual {
	h := XMM()
	if k.t.evex() {
		VEXTRACTI32X4(U8(1), v, h)
	} else {
		VEXTRACTI128(U8(1), v, h)
	}
	VPADDD(h, v.AsX(), h)
	return h
}

// halves gathers the n fp16 values at m(0..n-1) as floats (n = 1, 4 or 8:
// an xmm, or a ymm for 8).
func halves(n int, m func(i int) Mem) VecVirtual {
	x := XMM()
	VMOVD(m(0), x) // every block has at least four bytes there
	for i := 1; i < n; i++ {
		VPINSRW(U8(i), m(i), x, x)
	}
	if n == 8 {
		y := YMM()
		VCVTPH2PS(x, y)
		return y
	}
	VCVTPH2PS(x, x)
	return x
}

// e8m0Half returns e8m0half(e) = 2^(e-128) of the n exponent bytes at
// m(i) as floats: (e-1)<<23 for e >= 2, and the subnormals 0x00800000>>(2-e)
// for e < 2 (for e > 2 the variable shift count is >= 32 and gives 0; a
// signed max picks the right one, as (e-1)<<23 is negative or 0 for e < 2).
func (k *b32k) e8m0Half(n int, m func(i int) Mem) VecVirtual {
	x := XMM()
	VMOVD(m(0), x)
	for i := 1; i < n; i++ {
		VPINSRB(U8(i), m(i), x, x)
	}
	var e, s VecVirtual = XMM(), XMM()
	c2, c8 := Op(k.c2.AsX()), Op(k.c800000.AsX())
	if n == 8 {
		e, s = YMM(), YMM()
		c2, c8 = k.c2, k.c800000
	}
	VPMOVZXBD(x, e)
	VPSUBD(e, c2, s)
	VPSRLVD(s, c8, s)
	VPSLLD(U8(23), e, e)
	VPSUBD(c8, e, e)
	VPMAXSD(s, e, e)
	return e
}

// products returns the n blocks' float(sumi)*scale, rounded as the
// reference rounds (see the file comment); w(i), a(i) are block i's
// weight and activation blocks. da may be given (the multi-row kernel's
// broadcast activation scale) or nil.
func (k *b32k) products(n int, isum VecVirtual, w func(i int) Mem, da VecVirtual, a func(i int) Mem) VecVirtual {
	f := isum
	VCVTDQ2PS(isum, f)
	if da == nil {
		da = halves(n, a)
	}
	var dw VecVirtual
	if k.ty == b32MXFP4 {
		dw = k.e8m0Half(n, w)
	} else {
		dw = halves(n, w)
	}
	if k.ty == b32Q4_0 {
		VMULPS(dw, f, f)
		VMULPS(da, f, f)
		return f
	}
	VMULPS(da, dw, dw)
	VMULPS(dw, f, f)
	return f
}

// addLanes adds lanes 0..n-1 of v into the scalar sum (lane 0 of sum), one
// after the other.
func (k *b32k) addLanes(n int, v, sum VecVirtual) {
	x := v.AsX()
	for h := 0; h < n; h += 4 {
		if h == 4 {
			hi := XMM()
			if k.t.evex() {
				VEXTRACTF32X4(U8(1), v, hi)
			} else {
				VEXTRACTF128(U8(1), v, hi)
			}
			x = hi
		}
		VADDSS(x, sum, sum)
		t := XMM()
		VMOVSHDUP(x, t)
		VADDSS(t, sum, sum)
		t = XMM()
		VMOVHLPS(x, x, t)
		VADDSS(t, sum, sum)
		t = XMM()
		VPERMILPS(U8(0xff), x, t)
		VADDSS(t, sum, sum)
	}
}

// genB32Row emits dot<T><suffix>(w, a *byte, nb int) float32.
func genB32Row(t *target, ty *b32type) {
	name := "dot" + ty.name + t.suffix
	TEXT(name, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k := newB32k(t, ty)
	sum := XMM()
	VXORPS(sum, sum, sum)
	wm := func(i int) Mem { return Mem{Base: wp, Disp: i * ty.wsize} }
	am := func(i int) Mem { return Mem{Base: ap, Disp: i * 34} }

	Label("loop" + name)
	CMPQ(nb, U8(8))
	JB(LabelRef("tail" + name))
	// Blocks i and i+4 share a vector, one 128-bit half each, as the rows
	// of the eight-row kernel do.
	dot := func(i int) VecVirtual {
		lo, hi := k.pairCodes(wm(i), wm(i+4))
		return k.pairDot(lo, hi, k.prepPair2(am(i), am(i+4)))
	}
	h01 := k.hadd2(dot(0), dot(1))
	isum := k.hadd2(h01, k.hadd2(dot(2), dot(3)))
	p := k.products(8, isum, wm, nil, am)
	k.addLanes(8, p, sum)
	ADDQ(U32(8*ty.wsize), wp)
	ADDQ(U32(8*34), ap)
	SUBQ(U8(8), nb)
	JMP(LabelRef("loop" + name))

	Label("tail" + name)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	s := k.fold4(k.rowSum(wm(0), k.prep(am(0), false)))
	r := XMM()
	VPSHUFD(U8(0x4e), s, r)
	VPADDD(r, s, s)
	VPSHUFD(U8(0xb1), s, r)
	VPADDD(r, s, s)
	p1 := k.products(1, s, wm, nil, am)
	VADDSS(p1, sum, sum)
	ADDQ(U32(ty.wsize), wp)
	ADDQ(U32(34), ap)
	DECQ(nb)
	JMP(LabelRef("tail" + name))

	Label("done" + name)
	Store(sum, ReturnIndex(0))
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}

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
	k.t.bcast16(a.Offset(2), p.lo)
	k.t.bcast16(a.Offset(18), p.hi)
	return k.prepCorr(p)
}

// prepPair2 is prepPair for two activation blocks, a for the low halves
// and b for the high ones (the one-row kernel's two blocks per vector).
func (k *b32k) prepPair2(a, b Mem) pairPrep {
	return k.prepCorr(pairPrep{lo: k.pair(a.Offset(2), b.Offset(2)), hi: k.pair(a.Offset(18), b.Offset(18))})
}

func (k *b32k) prepCorr(p pairPrep) pairPrep {
	t := k.t
	switch {
	case t.vnni:
		o := k.off
		if k.ty == b32Q8_0 {
			o = k.x80
		}
		c := YMM()
		t.zero(c)
		vnniOp("VPDPBUSD", p.lo, o, c)
		vnniOp("VPDPBUSD", p.hi, o, c)
		p.corr = YMM()
		t.zero(p.corr)
		VPSUBD(c, p.corr, p.corr)
	case k.ty != b32Q8_0:
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
	switch k.ty {
	case b32Q5_0:
		k.q5Pair(wa.Offset(2), wb.Offset(2), lo, hi)
	case b32MXFP4:
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
	if k.ty == b32Q8_0 {
		if t.vnni {
			k.xor(k.x80, lo, lo)
			k.xor(k.x80, hi, hi)
			acc := YMM()
			t.copyv(p.corr, acc)
			vnniOp("VPDPBUSD", p.lo, lo, acc)
			vnniOp("VPDPBUSD", p.hi, hi, acc)
			return acc
		}
		var r [2]VecVirtual
		for i, x := range []VecVirtual{lo, hi} {
			y := []VecVirtual{p.lo, p.hi}[i]
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
		t.copyv(p.corr, acc)
		vnniOp("VPDPBUSD", p.lo, lo, acc)
		vnniOp("VPDPBUSD", p.hi, hi, acc)
		return acc
	}
	VPMADDUBSW(p.lo, lo, lo)
	VPMADDUBSW(p.hi, hi, hi)
	VPADDW(hi, lo, lo)
	VPSUBW(p.corr, lo, lo)
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
	prod := k.products(8, isum, row, da, nil)
	VADDPS(prod, acc, acc)
	ADDQ(U32(ty.wsize), wp)
	ADDQ(U32(ty.wsize), wp4)
	ADDQ(U32(34), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	out := Load(Param("out"), GP64())
	VMOVUPS(acc, Mem{Base: out})
	VZEROUPPER()
	RET()
}
