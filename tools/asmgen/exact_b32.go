package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Exact kernels for the 32-element block types against Q8_0 activations
// (Q8_0, Q4_0, Q5_0, MXFP4, IQ4_NL) and against Q8_1 activations (Q4_1,
// Q5_1: a minimum m per weight block, and the activation block's s =
// d*sum(q) next to its d, so the quants start at 4 of a 36-byte block). The reference (ggml's *_generic) computes an
// integer sum per block and then, per block and in block order,
// sumf += float(sumi)*scale, rounding every product and every sum. Integers
// add exactly in any order, so a block's sumi may come from any lane
// grouping; the float part is redone exactly:
//
//   - one row (dot<T><suffix>): eight blocks' int32 lane vectors are reduced
//     at once by a horizontal-add tree into one vector of eight sums, their
//     eight scale products are computed lane-wise (IEEE multiplication is the
//     same in a lane as in a scalar), and then eight dependent scalar adds
//     run in block order. That add chain, and the per-block work around it,
//     bound one row;
//   - eight rows (dot<T>r8<suffix>, exact_b32pair.go): lane r of one ymm is
//     row r's sumf, so one VADDPS per block advances eight independent
//     chains, and every activation block is loaded and prepared once for
//     the eight rows. kernelkit's MatVec and MatMul use it for all but the
//     last rows of a range.
//
// Each type's scale product, in the reference's order:
//
//	Q8_0, Q5_0:  float(sumi) * (dw*da)
//	IQ4_NL:      (da*dw) * float(sumi), the same bits
//	Q4_1, Q5_1:  (dw*da)*float(sumi) + m*s, added to sumf as one term
//	Q4_0:        (float(sumi)*dw) * da
//	MXFP4:       float(sumi) * (da*e8m0half(e))

// b32type is one block type.
type b32type struct {
	name  string
	wsize int    // bytes per weight block
	qoff  int    // offset of the quants in a weight block
	off   uint32 // the unsigned codes' offset (Q8_0: none, the quants are signed)
	// lut, where set, maps each 4-bit code to its signed int8 value
	// (IQ4_NL's kvalues_iq4nl): the looked-up quants then go through
	// Q8_0's signed path, since |value| <= 127 keeps its VPSIGNB and
	// VPMADDUBSW pairs within int16.
	lut []byte
	// min: the block has an fp16 minimum at 2 and dots against Q8_1
	// (Q4_1, Q5_1); the codes are unsigned and need no offset.
	min bool
	// qhoff is the offset of a Q5 block's 32-bit high-bit word.
	qhoff int
}

// actSize and actQ are the activation block's size and the offset of its
// quants: Q8_1 for the types with a minimum, else Q8_0.
func (ty *b32type) actSize() int {
	if ty.min {
		return 36
	}
	return 34
}

func (ty *b32type) actQ() int {
	if ty.min {
		return 4
	}
	return 2
}

// q5 reports whether the codes have a fifth bit in a qh word.
func (ty *b32type) q5() bool { return ty.qhoff != 0 }

// signed reports whether the weight quants are signed bytes (Q8_0, and the
// looked-up IQ4_NL values) rather than unsigned codes with an offset.
func (ty *b32type) signed() bool { return ty == b32Q8_0 || ty.lut != nil }

var (
	b32Q8_0  = &b32type{name: "Q8_0", wsize: 34, qoff: 2}
	b32Q4_0  = &b32type{name: "Q4_0", wsize: 18, qoff: 2, off: 8}
	b32Q5_0  = &b32type{name: "Q5_0", wsize: 22, qoff: 6, off: 16, qhoff: 2}
	b32Q4_1  = &b32type{name: "Q4_1", wsize: 20, qoff: 4, min: true}
	b32Q5_1  = &b32type{name: "Q5_1", wsize: 24, qoff: 8, min: true, qhoff: 4}
	b32MXFP4 = &b32type{name: "MXFP4", wsize: 17, qoff: 1, off: 12}
	b32IQ4NL = &b32type{name: "IQ4_NL", wsize: 18, qoff: 2,
		lut: []byte{0x81, 0x98, 0xad, 0xbf, 0xcf, 0xdd, 0xea, 0xf6, 1, 13, 25, 38, 53, 69, 89, 113}}
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
	sa                  VecVirtual // Q8_1's s, broadcast (the eight-row kernels)
}

func newB32k(t *target, ty *b32type) *b32k {
	k := &b32k{t: t, ty: ty}
	if ty.lut != nil {
		k.c0F, k.table = YMM(), YMM()
		VPBROADCASTD(constU32(0x0f0f0f0f), k.c0F)
		lut, name := ty.lut, "b32"+ty.name+"lut"
		if t.vnni {
			// VNNI multiplies unsigned weights: the values plus 128, whose
			// part of the sum prepCorr takes off, as Q8_0's XOR does.
			lut, name = make([]byte, len(ty.lut)), name+"u"
			for i, v := range ty.lut {
				lut[i] = v ^ 0x80
			}
		}
		t.bcast16(constData(name, lut), k.table)
	}
	if ty.signed() {
		if t.vnni {
			k.x80 = YMM()
			VPBROADCASTD(constU32(0x80808080), k.x80)
		} else {
			k.ones = YMM()
			VPBROADCASTD(constU32(0x00010001), k.ones)
		}
		return k
	}
	k.c0F = YMM()
	VPBROADCASTD(constU32(0x0f0f0f0f), k.c0F)
	if ty.off != 0 {
		k.off = YMM()
		VPBROADCASTD(constU32(ty.off*0x01010101), k.off)
	}
	if !t.vnni {
		k.ones = YMM()
		VPBROADCASTD(constU32(0x00010001), k.ones)
	}
	switch {
	case ty.q5():
		k.c10 = YMM()
		VPBROADCASTD(constU32(0x10101010), k.c10)
		if !t.evex() {
			k.bits = YMM()
			VPBROADCASTQ(constData("b32q5bits", []byte{0xfe, 0xfd, 0xfb, 0xf7, 0xef, 0xdf, 0xbf, 0x7f}), k.bits)
		}
	case ty == b32MXFP4:
		k.table = YMM()
		t.bcast16(constData("b32mxfp4lut", []byte{12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0}), k.table)
		k.c2, k.c800000 = YMM(), YMM()
		VPBROADCASTD(constU32(2), k.c2)
		VPBROADCASTD(constU32(0x00800000), k.c800000)
	}
	return k
}

func (k *b32k) xor(src2, src1, dst Op) {
	if k.t.evex() {
		VPXORD(src2, src1, dst)
	} else {
		VPXOR(src2, src1, dst)
	}
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

// halves gathers the n fp16 values at m(0..n-1) as floats (n = 1, 4 or 8:
// an xmm, or a ymm for 8).
func (k *b32k) halves(n int, m func(i int) Mem) VecVirtual {
	x := k.gather(n, 2, m)
	if n == 8 {
		y := YMM()
		VCVTPH2PS(x, y)
		return y
	}
	VCVTPH2PS(x, x)
	return x
}

// gather packs the n values of size bytes (1 or 2) at m(0..n-1) into the
// low bytes of an xmm. Eight are composed in general registers, which the
// vector kernels mostly leave idle, rather than by seven inserts, which
// cost a vector shuffle each (measured: MXFP4 12% faster, Q4_0 and Q8_0 the
// same; AVX-512 Q5_0, which builds its masks there, 3% slower); fewer take
// the inserts.
func (k *b32k) gather(n, size int, m func(i int) Mem) VecVirtual {
	x := XMM()
	if n < 8 || (k.ty.q5() && k.t.evex()) {
		VMOVD(m(0), x) // every block has at least four bytes there
		for i := 1; i < n; i++ {
			if size == 1 {
				VPINSRB(U8(i), m(i), x, x)
			} else {
				VPINSRW(U8(i), m(i), x, x)
			}
		}
		return x
	}
	per := 8 / size // values per qword
	var q []GPVirtual
	for i := 0; i < n; i += per {
		acc := GP64()
		for j := 0; j < per && i+j < n; j++ {
			v := acc
			if j > 0 {
				v = GP64()
			}
			if size == 1 {
				MOVBQZX(m(i+j), v)
			} else {
				MOVWQZX(m(i+j), v)
			}
			if j > 0 {
				SHLQ(U8(8*size*j), v)
				ORQ(v, acc)
			}
		}
		q = append(q, acc)
	}
	VMOVQ(q[0], x)
	if len(q) > 1 {
		VPINSRQ(U8(1), q[1], x, x)
	}
	return x
}

// e8m0Half returns e8m0half(e) = 2^(e-128) of the n exponent bytes at
// m(i) as floats: (e-1)<<23 for e >= 2, and the subnormals 0x00800000>>(2-e)
// for e < 2 (for e > 2 the variable shift count is >= 32 and gives 0; a
// signed max picks the right one, as (e-1)<<23 is negative or 0 for e < 2).
func (k *b32k) e8m0Half(n int, m func(i int) Mem) VecVirtual {
	x := k.gather(n, 1, m)
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
		da = k.halves(n, a)
	}
	var dw VecVirtual
	if k.ty == b32MXFP4 {
		dw = k.e8m0Half(n, w)
	} else {
		dw = k.halves(n, w)
	}
	if k.ty == b32Q4_0 {
		VMULPS(dw, f, f)
		VMULPS(da, f, f)
		return f
	}
	VMULPS(da, dw, dw)
	VMULPS(dw, f, f)
	if k.ty.min {
		// + m*s, the block's own sum before it joins sumf.
		m := k.halves(n, func(i int) Mem { return w(i).Offset(2) })
		sa := k.sa
		if sa == nil {
			sa = k.halves(n, func(i int) Mem { return a(i).Offset(2) })
		}
		VMULPS(sa, m, m)
		VADDPS(m, f, f)
	}
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
	as := ty.actSize()
	am := func(i int) Mem { return Mem{Base: ap, Disp: i * as} }

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
	ADDQ(U32(8*as), ap)
	SUBQ(U8(8), nb)
	JMP(LabelRef("loop" + name))

	Label("tail" + name)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	// One block, in both halves: the low half's four lanes are its sum.
	lo, hi := k.pairCodes(wm(0), wm(0))
	s := k.pairDot(lo, hi, k.prepPair2(am(0), am(0))).AsX().(VecVirtual)
	r := XMM()
	VPSHUFD(U8(0x4e), s, r)
	VPADDD(r, s, s)
	VPSHUFD(U8(0xb1), s, r)
	VPADDD(r, s, s)
	p1 := k.products(1, s, wm, nil, am)
	VADDSS(p1, sum, sum)
	ADDQ(U32(ty.wsize), wp)
	ADDQ(U32(as), ap)
	DECQ(nb)
	JMP(LabelRef("tail" + name))

	Label("done" + name)
	Store(sum, ReturnIndex(0))
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}
