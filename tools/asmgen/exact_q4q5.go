package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q4_K and Q5_K · Q8_K, bit for bit the reference's float
// (ggml_vec_dot_q4_K_q8_K_generic, core/quant vecDotQ4K/vecDotQ5K).
//
// The reference keeps, per block, eight int32 lanes aux32[l]: the
// scale-weighted products of the elements whose index is l mod 8; then
// sums[l] += d*aux32[l] and sumf -= dmin*sumi, both rounded twice, and at
// the end sumf += sums[0], ..., sums[7] in order. Integers add exactly in
// any order, so only the grouping matters: every 32-element run (one
// sub-block, one scale) of weights and activations is permuted so that
// dword l holds its four elements of lane l (byte 4l+g takes element
// 8g+l). VPMADDUBSW then pairs only elements of one lane, VPMADDWD (or
// VPDPWSSD) with the sub-block's scale sums them into dword l, and the
// block's eight dwords are aux32 itself. The float part is the reference's
// operations, lane for lane: VMULPS and VADDPS on the eight sums (no FMA),
// and sumf as a scalar (one lane per activation row in the four-row
// kernels).
//
// The permutation is one VPERMB with AVX512_VBMI (the VNNI targets: the
// plugin registers these kernels only where the CPU has VBMI), else VPERMD
// (dword l of each 8-byte group to its half) and an in-lane VPSHUFB (a 4×4
// byte transpose). For Q4_K the 32 packed bytes are permuted once for both
// nibble sub-blocks; Q5_K's qh likewise for all eight.

// xk is the state of one exact Q4_K/Q5_K kernel being emitted.
type xk struct {
	t    *target
	vbmi bool
	wp   Register
	acts []Mem
	sums []VecVirtual // per row: the reference's sums[0..7], a ymm
	sumf VecVirtual   // lane k: row k's sumf
	// sumfMem, where set, holds sumf instead of a register: four rows on
	// AVX2 need all sixteen.
	sumfMem *Mem
	idx     Op // VPERMB or VPERMD index
	tr      Op // VPSHUFB transpose after VPERMD (no VBMI)
}

// laneOrder is the byte permutation of one 32-byte run: byte 4l+g takes
// byte 8g+l.
func laneOrder() []byte {
	var b []byte
	for l := 0; l < 8; l++ {
		for g := 0; g < 4; g++ {
			b = append(b, byte(8*g+l))
		}
	}
	return b
}

// permIndex returns the target's permutation index: for every 32-byte run
// of a vector, laneOrder (VPERMB), or the dwords 0,2,4,6,1,3,5,7 (VPERMD).
func (x *xk) permIndex() Mem {
	var b []byte
	for h := 0; h < x.t.w/32; h++ {
		if x.vbmi {
			for _, v := range laneOrder() {
				b = append(b, v+byte(32*h))
			}
			continue
		}
		for _, d := range []int{0, 2, 4, 6, 1, 3, 5, 7} {
			b = append(b, byte(d+8*h), 0, 0, 0)
		}
	}
	kind := map[bool]string{true: "b", false: "d"}[x.vbmi]
	return constData(fmt.Sprintf("xperm%s%d", kind, x.t.w), b)
}

// transpose is the in-lane VPSHUFB that finishes the VPERMD route: after
// it, dword c of a 128-bit lane holds byte c of each of the lane's four
// dwords.
func (x *xk) transpose() Mem {
	var b []byte
	for lane := 0; lane < x.t.w/16; lane++ {
		for c := 0; c < 4; c++ {
			for g := 0; g < 4; g++ {
				b = append(b, byte(4*g+c))
			}
		}
	}
	return constData(fmt.Sprintf("xtr%d", x.t.w), b)
}

// perm loads a full vector from m and permutes each 32-byte run of it.
func (x *xk) perm(m Mem) VecVirtual {
	d := x.t.vec()
	if x.vbmi {
		VPERMB(m, x.idx, d)
		return d
	}
	VPERMD(m, x.idx, d)
	VPSHUFB(x.tr, d, d)
	return d
}

// perm32 loads the 32 bytes at m, permuted, into every 256-bit half.
func (x *xk) perm32(m Mem) VecVirtual {
	if !x.t.zmm() {
		return x.perm(m)
	}
	d := x.t.vec()
	x.t.load32(m, d)
	if x.vbmi {
		VPERMB(d, x.idx, d)
	} else {
		VPERMD(d, x.idx, d)
		VPSHUFB(x.tr, d, d)
	}
	return d
}

// q45Loop emits an exact Q4_K/Q5_K kernel with the signatures of kLoop.
// body emits one block; pre the loop-invariant constants.
func q45Loop(t *target, name string, wsize, m int, pre func(x *xk), body func(x *xk)) {
	fn := "dot" + name + t.suffix
	sig := "func(w, a *byte, nb int) float32"
	if m > 1 {
		fn = "dot" + name + "x" + string(rune('0'+m)) + t.suffix
		sig = "func(w, a *byte, nb, astride int, out *float32)"
	}
	TEXT(fn, NOSPLIT, sig)
	Pragma("noescape")
	x := &xk{t: t, vbmi: t.vnni, wp: Load(Param("w"), GP64())}
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	x.acts = []Mem{{Base: ap}}
	if m > 1 {
		s := Load(Param("astride"), GP64())
		s3 := GP64()
		LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
		x.acts = append(x.acts, Mem{Base: ap, Index: s, Scale: 1}, Mem{Base: ap, Index: s, Scale: 2},
			Mem{Base: ap, Index: s3, Scale: 1})
	}
	for range m {
		s := YMM()
		t.zerof(s)
		x.sums = append(x.sums, s)
	}
	x.sumf = XMM()
	t.zerof(x.sumf)
	t.memConsts = m > 1
	if t.memConsts && !t.evex() {
		loc := AllocLocal(16)
		VMOVUPS(x.sumf, loc)
		x.sumfMem = &loc
	}
	idx := x.permIndex()
	if t.memConsts && !t.evex() {
		// Four rows on AVX2 need every register; the transpose reads its
		// control from memory.
		x.tr = x.transpose()
	} else if !x.vbmi {
		r := t.vec()
		t.mov(x.transpose(), r)
		x.tr = r
	}
	r := t.vec()
	t.mov(idx, r)
	x.idx = r
	pre(x)
	t.memConsts = false
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	body(x)
	ADDQ(U32(wsize), x.wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	if x.sumfMem != nil {
		VMOVUPS(*x.sumfMem, x.sumf)
	}
	var outp Register
	if m > 1 {
		outp = Load(Param("out"), GP64())
	}
	for k := range m {
		s := XMM()
		VSHUFPS(U8(0x55*k), x.sumf, x.sumf, s) // row k's sumf into lane 0
		x.addLanes(x.sums[k], s)
		if m == 1 {
			Store(s, ReturnIndex(0))
		} else {
			VMOVSS(s, Mem{Base: outp, Disp: 4 * k})
		}
	}
	VZEROUPPER()
	RET()
}

// addLanes adds the eight floats of v to lane 0 of s, lane 0 first, as the
// reference's final loop does.
func (x *xk) addLanes(v VecVirtual, s Register) {
	hi := XMM()
	if x.t.evex() {
		VEXTRACTF32X4(U8(1), v, hi)
	} else {
		VEXTRACTF128(U8(1), v, hi)
	}
	for _, q := range []Register{v.AsX(), hi} {
		VADDSS(q, s, s)
		e := XMM()
		VMOVSHDUP(q, e)
		VADDSS(e, s, s)
		VMOVHLPS(q, q, e)
		VADDSS(e, s, s)
		VSHUFPS(U8(0xff), q, q, e)
		VADDSS(e, s, s)
	}
}

// extract128 puts the high 128 bits of the ymm v into a new xmm.
func (x *xk) extract128(v VecVirtual) VecVirtual {
	h := XMM()
	if x.t.evex() {
		VEXTRACTI32X4(U8(1), v, h)
	} else {
		VEXTRACTI128(U8(1), v, h)
	}
	return h
}

// intSums reduces each row's eight int32 lanes (ymm) to one int32: lane k
// of the returned xmm for row k. The order is free: integers.
func (x *xk) intSums(p []VecVirtual) VecVirtual {
	if len(p) == 1 {
		h := x.extract128(p[0])
		VPADDD(h, p[0].AsX(), h)
		s := XMM()
		VPSHUFD(U8(0x4e), h, s)
		VPADDD(s, h, h)
		VPSHUFD(U8(0xb1), h, s)
		VPADDD(s, h, h)
		return h
	}
	// A transpose: after the unpacks and adds, 128-bit lane L holds in
	// dword k the partial sum of row k over that lane.
	pair := func(a, b VecVirtual) VecVirtual {
		lo, hi := YMM(), YMM()
		VPUNPCKLDQ(b, a, lo)
		VPUNPCKHDQ(b, a, hi)
		VPADDD(hi, lo, lo)
		return lo
	}
	t01, t23 := pair(p[0], p[1]), pair(p[2], p[3])
	lo, hi := YMM(), YMM()
	VPUNPCKLQDQ(t23, t01, lo)
	VPUNPCKHQDQ(t23, t01, hi)
	VPADDD(hi, lo, lo)
	h := x.extract128(lo)
	VPADDD(lo.AsX(), h, h)
	return h
}

// block emits one block's work for every row. quants(i) returns vector i
// of the block's permuted unsigned quants (one sub-block per 256 bits);
// nacc integer accumulators per row hide VPDPWSSD's latency.
func (x *xk) block(nacc int, quants func(i int) VecVirtual) {
	t, wp := x.t, x.wp
	scb := t.k4Scales(wp)

	// sumf -= dmin*sumi, sumi = sum_j bsums[j]*mins[j/2].
	mw := YMM()
	var dup []byte
	for j := 0; j < 16; j++ {
		dup = append(dup, byte(8+j/2), 0x80)
	}
	VPSHUFB(constData("k4mdup", dup), scb.AsY(), mw)
	var prods []VecVirtual
	for _, a := range x.acts {
		p := YMM()
		VPMADDWD(a.Offset(q8KBsums), mw, p)
		prods = append(prods, p)
	}
	sumi := x.intSums(prods)
	VCVTDQ2PS(sumi, sumi)
	hd := halfs(Mem{Base: wp}, true) // fp16 d, dmin as float32
	var dsingle VecVirtual
	if len(x.acts) == 1 {
		dd := XMM()
		VBROADCASTSS(x.acts[0], dd)
		VMULPS(hd, dd, dd) // d, dmin
		dm := XMM()
		VMOVSHDUP(dd, dm)
		VMULSS(sumi, dm, dm)
		VSUBSS(dm, x.sumf, x.sumf)
		dsingle = YMM()
		VBROADCASTSS(dd, dsingle)
	} else {
		yd := XMM()
		VMOVSS(x.acts[0], yd)
		for k := 1; k < len(x.acts); k++ {
			VINSERTPS(U8(k<<4), x.acts[k], yd, yd)
		}
		dm := XMM()
		VMOVSHDUP(hd, dm)
		VBROADCASTSS(dm, dm)
		VMULPS(yd, dm, dm) // each row's dmin
		VMULPS(sumi, dm, dm)
		if x.sumfMem != nil {
			f := XMM()
			VMOVUPS(*x.sumfMem, f)
			VSUBPS(dm, f, f)
			VMOVUPS(f, *x.sumfMem)
		} else {
			VSUBPS(dm, x.sumf, x.sumf)
		}
	}

	// aux32: the quants times the activations, scaled per sub-block.
	sums := make([]*isumAcc, len(x.acts))
	for k := range sums {
		sums[k] = t.newIsum(nacc)
	}
	sidx := t.scaleIndex(32)
	for i := 0; i < 256/t.w; i++ {
		u := quants(i)
		s := t.vec()
		VPSHUFB(sidx.Offset(i*t.w), scb, s)
		for k, a := range x.acts {
			y := x.perm(a.Offset(q8KQs + i*t.w))
			VPMADDUBSW(y, u, y)
			sums[k].add(y, s)
		}
	}
	for k, sum := range sums {
		v := sum.sum()
		var y Register = v.AsY()
		if t.zmm() {
			// The two halves are the even and the odd sub-blocks.
			h := YMM()
			VEXTRACTI64X4(U8(1), v, h)
			VPADDD(h, v.AsY(), h)
			y = h
		}
		VCVTDQ2PS(y, y)
		d := dsingle
		if d == nil {
			d = YMM()
			VBROADCASTSS(hd, d)
			f := YMM()
			VBROADCASTSS(x.acts[k], f)
			VMULPS(f, d, d) // fp16(d) * y.d, as the reference rounds it
		}
		VMULPS(d, y, y)
		VADDPS(y, x.sums[k], x.sums[k])
	}
}

// genK exact: one row with two integer accumulators, four rows with one.
func genExactK(t *target, name string, wsize int, pre func(x *xk), body func(x *xk, nacc int)) {
	q45Loop(t, name, wsize, 1, pre, func(x *xk) { body(x, 2) })
	q45Loop(t, name, wsize, 4, pre, func(x *xk) { body(x, 1) })
}

// q4Quants returns vector i of the permuted 4-bit quants at qs (Q4_K's
// layout: each 32 bytes hold two sub-blocks, low nibbles first); q caches
// the permuted bytes between the two nibbles on 256-bit targets.
func (x *xk) q4Quants(i int, qs Mem, q *VecVirtual, c0F Op) VecVirtual {
	t := x.t
	u := t.vec()
	if t.zmm() {
		p := x.perm32(qs.Offset(32 * i))
		vshift(0, -4, p, u)
	} else {
		if i%2 == 0 {
			*q = x.perm32(qs.Offset(32 * (i / 2)))
			t.and(c0F, *q, u)
			return u
		}
		VPSRLW(U8(4), *q, u)
	}
	t.and(c0F, u, u)
	return u
}

func genQ4KExact(t *target) {
	var c0F Op
	pre := func(x *xk) { c0F = t.konst(0x0f0f0f0f) }
	genExactK(t, "Q4K", 144, pre, func(x *xk, nacc int) {
		var q VecVirtual
		x.block(nacc, func(i int) VecVirtual {
			return x.q4Quants(i, Mem{Base: x.wp, Disp: 16}, &q, c0F)
		})
	})
}

func genQ5KExact(t *target) {
	var c0F, c10 Op
	pre := func(x *xk) { c0F, c10 = t.konst(0x0f0f0f0f), t.konst(0x10101010) }
	genExactK(t, "Q5K", 176, pre, func(x *xk, nacc int) {
		var q, qh VecVirtual
		x.block(nacc, func(i int) VecVirtual {
			if i == 0 {
				// Not before: the minimum part needs the registers.
				qh = x.perm32(Mem{Base: x.wp, Disp: 16})
			}
			u := x.q4Quants(i, Mem{Base: x.wp, Disp: 48}, &q, c0F)
			if t.evex() {
				// Bit r of qh is the fifth bit of sub-block r: add 16 where set.
				m := K()
				VPTESTMB(t.runBits(i), qh, m)
				VPADDB(c10, u, m, u)
				return u
			}
			h := t.vec()
			t.shiftBits(4-i, qh, h)
			t.and(c10, h, h)
			t.or(h, u, u)
			return u
		})
	})
}
