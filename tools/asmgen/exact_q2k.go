package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q2_K · Q8_K, bit for bit the reference (core/quant vecDotQ2K, ggml's
// ggml_vec_dot_q2_K_q8_K_generic). Per block the reference forms two
// integers, isum = sum of scale*q2*q8 and summs = sum of min*bsum, and
// then, in float32, each rounded:
//
//	sumf += dall*float(isum) - dmin*float(summs)   dall, dmin = y.d*d, y.d*dmin
//
// Integers add exactly in any order, so the SIMD code may sum each block's
// products in whatever lanes suit it; what it may not do is fold the
// scales in before the lanes are summed. So every block ends in two int32
// vectors whose lane sums are isum and summs. Reducing two vectors per
// block to scalars is the cost; it is shared by reducing several at once
// (a transpose-add: lane j of the result is the sum of vector j), after
// which the float operations run on a vector of blocks (or rows) lane by
// lane, exactly as the reference rounds them, and only the final add into
// sumf is scalar and in block order. Four activation rows have four
// independent sums, so there the add is one vector add per block.

// genQ2KExact emits dotQ2K<suffix> and dotQ2Kx2..x4<suffix>.
func genQ2KExact(t *target) {
	q2kOne(t, false)
	for m := 2; m <= 4; m++ {
		q2kFour(t, false, m)
	}
	if t.vnni {
		// q2lDotQ2K<suffix>, q2lDotQ2Kx2..x4<suffix>: the same with GFNI
		// table indices (q2lgfni.go), for CPUs that have it.
		q2kOne(t, true)
		for m := 2; m <= 4; m++ {
			q2kFour(t, true, m)
		}
	}
}

// q2kGroup is the number of blocks the single-row kernel reduces at once:
// their isums and summs fill the eight int32 lanes of one ymm.
const q2kGroup = 4

// q2kOne emits dotQ2K<suffix>(w, a *byte, nb int) float32.
func q2kOne(t *target, gfni bool) {
	fn := q2lName("dotQ2K", t, gfni)
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	sumf := XMM()
	t.zerof(sumf)
	c0F, c03 := t.konst(0x0f0f0f0f), t.konst(0x03030303)
	gf := q2lLoad(t, gfni, true)
	// Software-pipelined: an iteration sums the integers of its group and
	// then does the float part of the group before, whose integers are long
	// done, so that neither the reduction's latency nor the sequential adds
	// hold up the next group's loads.
	carry := YMM() // the previous group's isums and summs
	CMPQ(nb, U8(q2kGroup))
	JB(LabelRef("tail" + fn))
	pre, next := q2lPipeline(t, gf, wp, nb, c0F, fn)
	q2kGroupInts(t, wp, ap, c0F, c03, carry, nil, gf, pre, next)
	ADDQ(U32(q2kGroup*84), wp)
	ADDQ(U32(q2kGroup*q8KSize), ap)
	SUBQ(U8(q2kGroup), nb)
	Label("group" + fn)
	CMPQ(nb, U8(q2kGroup))
	JB(LabelRef("drain" + fn))
	q2kGroupInts(t, wp, ap, c0F, c03, carry, func() { q2kGroupFloat(t, wp, ap, -q2kGroup, carry, sumf) }, gf, pre, next)
	ADDQ(U32(q2kGroup*84), wp)
	ADDQ(U32(q2kGroup*q8KSize), ap)
	SUBQ(U8(q2kGroup), nb)
	JMP(LabelRef("group" + fn))
	Label("drain" + fn)
	q2kGroupFloat(t, wp, ap, -q2kGroup, carry, sumf)

	Label("tail" + fn)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("one" + fn)
	{
		w, a := Mem{Base: wp}, Mem{Base: ap}
		is := t.foldY(t.q2kInts(w, []Mem{a}, 2, c0F, c03, gf)[0])
		sm := q2kSumms(w, []Mem{a})[0]
		// [isum, summs] in lanes 0 and 1.
		m := t.pairSum(is, sm)
		x := t.fold128(t.quadSum(m, m))
		h := XMM()
		f := XMM()
		VCVTDQ2PS(x, f)
		dd := halfs(Mem{Base: wp, Disp: 80}, true) // d, dmin
		yd := XMM()
		VBROADCASTSS(a, yd)
		VMULPS(dd, yd, dd) // dall, dmin
		VMULPS(dd, f, f)
		VMOVSHDUP(f, h)
		VSUBSS(h, f, f)
		VADDSS(f, sumf, sumf)
	}
	ADDQ(U32(84), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("one" + fn))

	Label("done" + fn)
	Store(sumf, ReturnIndex(0))
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}

// q2kGroupInts sums the integers of the q2kGroup blocks at wp, ap into
// dst: lanes 2b and 2b+1 block b's isum and summs. between, if not nil, is
// emitted before dst is written. pre, if not nil, are the group's tables,
// and next is emitted after the group's last use of them.
func q2kGroupInts(t *target, wp, ap Register, c0F, c03 Op, dst VecVirtual, between func(), gf *q2lRegs, pre [][]VecVirtual, next func()) {
	// Each block's pair is merged as soon as it is done, so that few
	// vectors stay live.
	var isums []VecVirtual
	var group [][]VecVirtual
	for b := 0; b < q2kGroup; b++ {
		w, a := Mem{Base: wp, Disp: 84 * b}, Mem{Base: ap, Disp: q8KSize * b}
		var is []VecVirtual
		if t.vnni && !t.zmm() {
			// The four blocks interleaved, so that their VPDPBUSD chains
			// overlap (measured on Zen 4; AVX2's VPADDD chains and the
			// 512-bit kernels gain nothing from it).
			if b == 0 {
				var ws []Mem
				var as [][]Mem
				for k := 0; k < q2kGroup; k++ {
					ws = append(ws, w.Offset(84*k))
					as = append(as, []Mem{a.Offset(q8KSize * k)})
				}
				group = t.q2kLutN(ws, as, 1, c0F, c03, gf, pre)
				if next != nil {
					next()
				}
			}
			is = group[b]
		} else {
			is = t.q2kInts(w, []Mem{a}, 2, c0F, c03, gf)
		}
		v := t.pairSum(t.foldY(is[0]), q2kSumms(w, []Mem{a})[0])
		if b%2 == 0 {
			isums = append(isums, v)
		} else {
			isums[b/2] = t.quadSum(isums[b/2], v)
		}
	}
	x, y := isums[0], isums[1]
	if between != nil {
		between()
	}
	t.halvesSum(x, y, dst)
}

// q2kGroupFloat adds the float results of the group whose sums are in iv
// and whose blocks start blk blocks from wp, ap into sumf, in block order.
func q2kGroupFloat(t *target, wp, ap Register, blk int, iv, sumf VecVirtual) {
	w := Mem{Base: wp, Disp: 84 * blk}
	// [d0 dmin0 d1 dmin1 | d2 dmin2 d3 dmin3]
	x := XMM()
	VMOVD(w.Offset(80), x)
	for b := 1; b < 4; b++ {
		// VINSERTPS moves the two halves as bits (VPINSRD's EVEX form
		// would need AVX512DQ).
		VINSERTPS(U8(b<<4), w.Offset(84*b+80), x, x)
	}
	dd := YMM()
	VCVTPH2PS(x, dd)
	diff := q2kPairsFloat(t, iv, dd, func(b int) Mem { return Mem{Base: ap, Disp: q8KSize * (blk + b)} })
	// The reference's sequential sum.
	VADDSS(diff.AsX(), sumf, sumf)
	l2 := XMM()
	VMOVHLPS(diff.AsX(), diff.AsX(), l2)
	VADDSS(l2, sumf, sumf)
	hi := XMM()
	if t.evex() {
		VEXTRACTF32X4(U8(1), diff, hi)
	} else {
		VEXTRACTF128(U8(1), diff, hi)
	}
	VADDSS(hi, sumf, sumf)
	l6 := XMM()
	VMOVHLPS(hi, hi, l6)
	VADDSS(l6, sumf, sumf)
}

// q2kFour emits dotQ2Kx<m><suffix>(w, a *byte, nb, astride int, out
// *float32): m = 2, 3 or 4 activation rows at a + k*astride against one
// weight row, their sums in out[0:m] (out[m:4] are written too, with
// garbage). Fewer than four rows fill the float lanes of the missing ones
// with copies of the last row's (the same operations, lane by lane).
func q2kFour(t *target, gfni bool, m int) {
	fn := q2lName("dotQ2Kx"+string(rune('0'+m)), t, gfni)
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb, astride int, out *float32)")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	s := Load(Param("astride"), GP64())
	acts := []Mem{{Base: ap}, {Base: ap, Index: s, Scale: 1}, {Base: ap, Index: s, Scale: 2}}
	if m > 3 {
		s3 := GP64()
		LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
		acts = append(acts, Mem{Base: ap, Index: s3, Scale: 1})
	}
	acts = acts[:m]
	lane := func(k int) Mem { return acts[min(k, m-1)] }
	acc := YMM() // row k's sum in lane 2k
	t.zerof(acc)
	t.memConsts = true
	c0F, c03 := t.konst(0x0f0f0f0f), t.konst(0x03030303)
	t.memConsts = false
	gf := q2lLoad(t, gfni, false)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	w := Mem{Base: wp}
	is := t.q2kInts(w, acts, 1, c0F, c03, gf)
	for k := range is {
		is[k] = t.foldY(is[k])
	}
	sm := q2kSumms(w, acts)
	// Lanes 2k, 2k+1: row k's isum and summs.
	var v [4]VecVirtual
	for k := range v {
		if k >= m {
			v[k] = v[m-1]
			continue
		}
		v[k] = t.pairSum(is[k], sm[k])
	}
	iv := t.halvesSum(t.quadSum(v[0], v[1]), t.quadSum(v[2], v[3]), nil)
	x := XMM()
	VPBROADCASTD(Mem{Base: wp, Disp: 80}, x)
	dd := YMM()
	VCVTPH2PS(x, dd) // d, dmin four times
	diff := q2kPairsFloat(t, iv, dd, lane)
	VADDPS(diff, acc, acc)
	ADDQ(U32(84), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	outp := Load(Param("out"), GP64())
	hi, r := XMM(), XMM()
	if t.evex() {
		VEXTRACTF32X4(U8(1), acc, hi)
	} else {
		VEXTRACTF128(U8(1), acc, hi)
	}
	VSHUFPS(U8(0x88), hi, acc.AsX(), r) // lanes 0, 2, 4, 6
	VMOVUPS(r, Mem{Base: outp})
	VZEROUPPER()
	RET()
}

// q2kPairsFloat is the reference's float part for four blocks (or rows):
// iv holds their isum and summs in lanes 2k and 2k+1, dd the matching
// weight scales d and dmin as float32, and y(k) is where the activation
// scale of k is. It returns dall*isum - dmin*summs of k in lane 2k.
func q2kPairsFloat(t *target, iv, dd VecVirtual, y func(k int) Mem) VecVirtual {
	// [y0 y0 y1 y1 | y2 y2 y3 y3]
	var ys [4]VecVirtual
	for k := range ys {
		ys[k] = XMM()
		VBROADCASTSS(y(k), ys[k])
	}
	y01, y23 := XMM(), XMM()
	VSHUFPS(U8(0), ys[1], ys[0], y01)
	VSHUFPS(U8(0), ys[3], ys[2], y23)
	yy := YMM()
	if t.evex() {
		VINSERTF32X4(U8(1), y23, y01.AsY(), yy)
	} else {
		VINSERTF128(U8(1), y23, y01.AsY(), yy)
	}
	VMULPS(dd, yy, dd) // dall, dmin
	f := YMM()
	VCVTDQ2PS(iv, f)
	VMULPS(dd, f, f)
	sh := YMM()
	VMOVSHDUP(f, sh)
	diff := YMM()
	VSUBPS(sh, f, diff)
	return diff
}

// q2kSumms returns, per activation row, an int32 ymm whose lanes sum to
// the block's summs: the high scale nibbles times the bsums.
func q2kSumms(w Mem, acts []Mem) []VecVirtual {
	mw := YMM()
	VPMOVZXBW(w, mw)
	VPSRLW(U8(4), mw, mw)
	var out []VecVirtual
	for _, a := range acts {
		p := YMM()
		VPMADDWD(a.Offset(q8KBsums), mw, p)
		out = append(out, p)
	}
	return out
}

// q2kInts is q2kLut with VNNI, else q2kRuns; and q2kRuns for one row at
// 512 bits without GFNI, where the tables do not pay off (measured on Zen
// 4; with GFNI, one table per block, they do: 7%). gf is nil without GFNI.
func (t *target) q2kInts(w Mem, acts []Mem, nacc int, c0F, c03 Op, gf *q2lRegs) []VecVirtual {
	if t.vnni && !(t.zmm() && len(acts) == 1 && gf == nil) {
		return t.q2kLut(w, acts, nacc, c0F, c03, gf)
	}
	return t.q2kRuns(w, acts, nacc, c0F, c03)
}

// q2kRuns returns, per activation row, an int32 vector (full width) whose
// lanes sum to the block's isum: the 2-bit quants times the activations
// (VPMADDUBSW) times the low scale nibbles (VPMADDWD or VPDPWSSD), with
// nacc accumulators per row.
func (t *target) q2kRuns(w Mem, acts []Mem, nacc int, c0F, c03 Op) []VecVirtual {
	scb := t.vec()
	t.bcast16(w, scb)
	t.and(c0F, scb, scb)
	idx := t.scaleIndex(16)
	sums := make([]*isumAcc, len(acts))
	for k := range sums {
		sums[k] = t.newIsum(nacc)
	}
	var q VecVirtual
	for i := 0; i < 256/t.w; i++ {
		u := t.twoBit(i, w.Offset(16), &q, c03)
		s := t.vec()
		VPSHUFB(idx.Offset(i*t.w), scb, s)
		for k, a := range acts {
			p := t.vec()
			VPMADDUBSW(a.Offset(q8KQs+i*t.w), u, p)
			sums[k].add(p, s)
		}
	}
	out := make([]VecVirtual, len(acts))
	for k, sum := range sums {
		out[k] = sum.sum()
	}
	return out
}

// q2kLut is q2kRuns with VNNI: a 2-bit quant times a 4-bit scale fits a
// byte (at most 45), so the quants are mapped through a table of
// [0, s, 2s, 3s] per sub-block (VPSHUFB) and one VPDPBUSD per vector and
// row does the rest, instead of VPMADDUBSW and VPDPWSSD. Vector i holds,
// per 128-bit lane, one sub-block: 8n+2j in even lanes and 8n+2j+1 in odd
// ones (n = half of the block, j = the quants' shift/2), so the table
// register of half n holds in its even lanes the tables of sub-blocks
// 8n+0,2,4,6 and in its odd ones 8n+1,3,5,7, and a quant's index is
// q + 4j. With gf (GFNI) one affine map makes the index (q2lgfni.go), and
// a 512-bit block has one table.
func (t *target) q2kLut(w Mem, acts []Mem, nacc int, c0F, c03 Op, gf *q2lRegs) []VecVirtual {
	return t.q2kLutN([]Mem{w}, [][]Mem{acts}, nacc, c0F, c03, gf, nil)[0]
}

// q2kLutN is q2kLut for several weight blocks at once, their instructions
// interleaved so that their accumulator chains overlap; tables, if not
// nil, are their tables, made beforehand (q2kTables).
func (t *target) q2kLutN(ws []Mem, acts [][]Mem, nacc int, c0F, c03 Op, gf *q2lRegs, tables [][]VecVirtual) [][]VecVirtual {
	ntab := 2
	if gf != nil && t.zmm() {
		ntab = 1 // q2lZmmTable: both halves in one
	}
	if tables == nil {
		tables = make([][]VecVirtual, len(ws))
		for b, w := range ws {
			tables[b] = t.q2kTables(w, c0F, gf, nil)
		}
	}
	// offs[i]: 4j for the shift j of every byte of vector i.
	var off []byte
	for i := 0; i < 256/t.w; i++ {
		for h := 0; h < t.w/32; h++ {
			j := i%(128/t.w)*(t.w/32) + h
			for range 32 {
				off = append(off, byte(4*j))
			}
		}
	}
	offs := constData("q2koffs"+string(rune('0'+t.w/32)), off)
	sums := make([][]*isumAcc, len(ws))
	for b := range ws {
		for range acts[b] {
			sums[b] = append(sums[b], t.newIsum(nacc))
		}
	}
	qs := make([]VecVirtual, len(ws))
	for i := 0; i < 256/t.w; i++ {
		for b, w := range ws {
			u := t.vec()
			per := 128 / t.w // vectors per half block
			n, r := i/per, i%per
			if r == 0 {
				qs[b] = t.vec()
				t.load32(w.Offset(16+32*n), qs[b])
			}
			if gf != nil {
				u = gf.field(t, n, r, qs[b], c03)
				VPSHUFB(u, tables[b][min(n, ntab-1)], u)
				for k, a := range acts[b] {
					sums[b][k].addBytes(u, a.Offset(q8KQs+i*t.w))
				}
				continue
			}
			if t.zmm() {
				if r == 0 {
					vshift(0, -2, qs[b], u)
				} else {
					vshift(-4, -6, qs[b], u)
				}
			} else {
				t.shiftBits(-2*r, qs[b], u)
			}
			if r == 0 && !t.zmm() {
				t.and(c03, u, u) // j = 0: no offset
			} else {
				VPTERNLOGD(U8(0xea), offs.Offset(i*t.w), c03, u) // u&3 | 4j
			}
			VPSHUFB(u, tables[b][n], u)
			for k, a := range acts[b] {
				sums[b][k].addBytes(u, a.Offset(q8KQs+i*t.w))
			}
		}
	}
	out := make([][]VecVirtual, len(ws))
	for b := range ws {
		for _, sum := range sums[b] {
			out[b] = append(out[b], sum.sum())
		}
	}
	return out
}

// foldY adds the halves of a zmm of int32 into a ymm; a ymm is returned as is.
func (t *target) foldY(v VecVirtual) VecVirtual {
	if !t.zmm() {
		return v
	}
	hi, r := YMM(), YMM()
	VEXTRACTI64X4(U8(1), v, hi)
	VPADDD(hi, v.AsY(), r)
	return r
}

// fold128 adds the 128-bit halves of a ymm of int32 into an xmm.
func (t *target) fold128(v VecVirtual) VecVirtual {
	hi, r := XMM(), XMM()
	if t.evex() {
		VEXTRACTI32X4(U8(1), v, hi)
	} else {
		VEXTRACTI128(U8(1), v, hi)
	}
	VPADDD(hi, v.AsX(), r)
	return r
}

// The transpose-add: pairSum, quadSum and halvesSum turn eight int32 ymm
// vectors v0..v7 into one whose lane j is the sum of vj's lanes:
// halvesSum(quadSum(pairSum(v0,v1), pairSum(v2,v3)), quadSum(pairSum(v4,v5), pairSum(v6,v7))).
// Unpacks rather than VPHADDD, which has no EVEX form (registers 16..31).

// pairSum: per 128-bit lane, [a0+a2, b0+b2, a1+a3, b1+b3].
func (t *target) pairSum(a, b VecVirtual) VecVirtual {
	lo, hi := YMM(), YMM()
	VPUNPCKLDQ(b, a, lo)
	VPUNPCKHDQ(b, a, hi)
	VPADDD(hi, lo, lo)
	return lo
}

// quadSum: per 128-bit lane, the lane sums of a, b, c, d given ab = pairSum(a, b)
// and cd = pairSum(c, d).
func (t *target) quadSum(ab, cd VecVirtual) VecVirtual {
	lo, hi := YMM(), YMM()
	VPUNPCKLQDQ(cd, ab, lo)
	VPUNPCKHQDQ(cd, ab, hi)
	VPADDD(hi, lo, lo)
	return lo
}

// halvesSum: [lo(x)+hi(x) | lo(y)+hi(y)].
func (t *target) halvesSum(x, y, dst VecVirtual) VecVirtual {
	lo, hi := YMM(), YMM()
	if t.evex() {
		VSHUFI64X2(U8(0x00), y, x, lo)
		VSHUFI64X2(U8(0x03), y, x, hi)
	} else {
		VPERM2I128(U8(0x20), y, x, lo)
		VPERM2I128(U8(0x31), y, x, hi)
	}
	if dst == nil {
		dst = lo
	}
	VPADDD(hi, lo, dst)
	return dst
}

// q2kMul: the 16-bit products of [s s] by 256 and by 258 are [0 s] and
// [2s 3s] (mod 2^16, 257 = [s s]/s being odd): one VPMULLW per table.
func q2kMul() Mem {
	var mul []byte
	for len(mul) < 64 {
		mul = append(mul, 0, 1, 2, 1)
	}
	return constData("q2kmul", mul)
}

// q2kTi is the VPSHUFB control of half n's table (see q2kLut).
func q2kTi(n int) Mem {
	var idx []byte
	for len(idx) < 64 {
		for odd := 0; odd < 2; odd++ {
			for k := 0; k < 4; k++ {
				for range 4 {
					idx = append(idx, byte(8*n+2*k+odd))
				}
			}
		}
	}
	return constData("q2kti"+string(rune('0'+n)), idx)
}

// q2kTables makes the tables of the block at w (q2kLut): into dst if not
// nil, else new registers.
func (t *target) q2kTables(w Mem, c0F Op, gf *q2lRegs, dst []VecVirtual) []VecVirtual {
	var mulc Op = q2kMul()
	if gf != nil && gf.mul != nil {
		mulc = gf.mul
	}
	ntab := 2
	if gf != nil && t.zmm() {
		ntab = 1
	}
	scb := t.vec()
	t.bcast16(w, scb)
	t.and(c0F, scb, scb)
	for n := 0; n < ntab; n++ {
		if len(dst) <= n {
			dst = append(dst, t.vec())
		}
		if ntab == 1 {
			VPSHUFB(q2lZmmTable(), scb, dst[n])
		} else {
			VPSHUFB(q2kTi(n), scb, dst[n])
		}
		VPMULLW(mulc, dst[n], dst[n])
	}
	return dst
}
