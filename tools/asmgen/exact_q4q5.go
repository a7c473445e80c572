package main

import (
	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
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
// plugin registers these kernels only where the CPU has VBMI and GFNI,
// which also takes Q4_K's high nibbles in one instruction), else VPERMD
// (dword l of each 8-byte group to its half) and an in-lane VPSHUFB (a 4×4
// byte transpose). For Q4_K the 32 packed bytes are permuted once for both
// nibble sub-blocks; Q5_K's qh likewise for all eight.
//
// Measured on Zen 4, the kernels run out of vector issue slots, so the
// choices below move work off the vector units: the 256-bit kernels unpack
// the 6-bit scales and mins with integer instructions and broadcast each
// scale from a constant table (scaleWords) by its index, as a load, where
// a VPSHUFB per sub-block was; and one-row kernels take the blocks in
// pairs so that one transpose reduces both blocks' minimum sums. (A table
// built on the stack per block was slower: its loads wait for the stores.)

// xk is the state of one exact Q4_K/Q5_K kernel being emitted.
type xk struct {
	t    *target
	vbmi bool // VPERMB and GFNI: the VNNI targets
	prep bool // activation rows prepared (q45prep.go)
	// compact: four prepared rows in the compact layout (q4mm.go)
	compact bool
	wp      Register
	acts    []Mem
	sums    []VecVirtual // per row: the reference's sums[0..7], a ymm
	sumf    VecVirtual   // four rows: lane k is row k's sumf; one row: lane 2
	// sumfMem, where set, holds sumf instead of a register: four rows on
	// AVX2 need all sixteen.
	sumfMem *Mem
	perm    *runPerm // every 32-byte run into lane order
	// table, where set, holds the address of scaleWords: the 256-bit
	// kernels unpack the scales with integer instructions.
	table Register
	// q4v: the q4v variant (q4v.go): the GFNI matrix in gfm, each
	// block's scales decoded between the vectors of the block before
	// (between, preGS), a software prefetch on the weights.
	q4v     bool
	gfm     VecVirtual
	between []func()  // what the next block emits between its vectors
	preGS   *gprScale // the next block's scales, decoded before it
}

// q45Loop emits an exact Q4_K/Q5_K kernel with the signatures of kLoop.
// block emits the work of one block, whose weights are at wp and whose
// activation rows at acts, and returns the row(s)' minimum parts
// (x.minSums) for the caller to finish: one row finishes two blocks' at
// once (x.finishMins2). pre emits the loop-invariant constants.
//
// tile (one row, prepared) emits dot<name>PT<suffix>(w, a *byte, nb int,
// acc *[9]float32, pf *byte) instead: it continues a row from acc (its
// eight float lanes, then sumf) and leaves it there unsummed, so that
// MatVec can run long rows a tile of blocks at a time (kernelkit's
// tiledRange), and prefetches, per block, the weights to come at pf into
// L2 and its own row two blocks ahead into L1, as the Q3_K/Q6_K tile
// kernels do.
func q45Loop(t *target, name string, wsize, m int, prep, tile bool, pre func(x *xk), block func(x *xk, wp Mem, acts []Mem) kmins) {
	fn := "dot" + name + t.suffix
	sig := "func(w, a *byte, nb int) float32"
	if prep {
		fn = "dot" + name + "P" + t.suffix
	}
	if tile {
		if m != 1 || !prep {
			panic("q45Loop: a tile kernel is one prepared row")
		}
		fn = "dot" + name + "PT" + t.suffix
		sig = "func(w, a *byte, nb int, acc *[9]float32, pf *byte)"
	}
	if m > 1 {
		fn = "dot" + name + "x" + string(rune('0'+m)) + t.suffix
		if prep {
			fn = "dot" + name + "x" + string(rune('0'+m)) + "P" + t.suffix
		}
		sig = "func(w, a *byte, nb, astride int, out *float32)"
	}
	if q4vGen {
		if m != 1 || !prep || t.zmm() || !t.vnni {
			panic("q45Loop: q4v is one prepared row, 256-bit VNNI")
		}
		fn = q4vName(fn)
	}
	TEXT(fn, NOSPLIT, sig)
	Pragma("noescape")
	x := &xk{t: t, vbmi: t.vnni, prep: prep, compact: prep && m > 1, wp: Load(Param("w"), GP64())}
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	x.acts = []Mem{{Base: ap}}
	if x.compact {
		x.acts = q4mmActs(ap)
	} else if m > 1 {
		s := Load(Param("astride"), GP64())
		s3 := GP64()
		LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
		x.acts = append(x.acts, Mem{Base: ap, Index: s, Scale: 1}, Mem{Base: ap, Index: s, Scale: 2},
			Mem{Base: ap, Index: s3, Scale: 1})
	}
	var accp, pf Register
	if tile {
		accp, pf = Load(Param("acc"), GP64()), Load(Param("pf"), GP64())
	}
	for range m {
		s := YMM()
		if tile {
			VMOVUPS(Mem{Base: accp}, s)
		} else {
			t.zerof(s)
		}
		x.sums = append(x.sums, s)
	}
	x.sumf = XMM()
	if tile {
		VBROADCASTSS(Mem{Base: accp, Disp: 32}, x.sumf) // lane 2 is one row's
	} else {
		t.zerof(x.sumf)
	}
	// fetch prefetches, in a tile kernel, for the next k blocks.
	fetch := func(k int) {
		if tile {
			tileFetch(pf, x.wp, k, wsize)
		}
	}
	t.memConsts = m > 1
	if t.memConsts && !t.evex() {
		loc := AllocLocal(16)
		VMOVUPS(x.sumf, loc)
		x.sumfMem = &loc
	}
	// Four rows on AVX2 need every register; their transpose reads its
	// control from memory.
	x.perm = newRunPerm(t, x.vbmi, !(t.memConsts && !t.evex()))
	if !t.zmm() {
		x.table = GP64()
		LEAQ(scaleWords(), x.table)
	}
	if q4vGen {
		x.q4v = true
		x.gfm = YMM()
		VMOVDQU64(gfHiNib(), x.gfm)
	}
	pre(x)
	t.memConsts = false
	if m == 1 && t.evex() {
		// Two blocks per iteration, then the odd one. (AVX2 has too few
		// registers to keep one block's minimum part across the next.)
		var gA *gprScale
		if x.q4v {
			// Block a's scales are decoded ahead: the first pair's here.
			TESTQ(nb, nb)
			JZ(LabelRef("done" + fn))
			gA = x.gprScales(Mem{Base: x.wp})
		}
		CMPQ(nb, U8(2))
		JB(LabelRef("one" + fn))
		Label("loop" + fn)
		fetch(2)
		if x.q4v && !tile {
			q4vFetch(x.wp, 2*wsize)
		}
		w2 := Mem{Base: x.wp, Disp: wsize}
		var gB *gprScale
		if x.q4v {
			// Block b's scales between block a's vectors, the next
			// pair's block a's (into gA's registers, dead by then)
			// between block b's: itself, or where none follows, this
			// pair's block a again (a harmless read).
			gB, x.between = x.gprScalesSteps(w2, nil)
			x.preGS = gA.again()
		}
		a := block(x, Mem{Base: x.wp}, x.acts)
		if x.q4v {
			p := GP64()
			LEAQ(Mem{Base: x.wp, Disp: 2 * wsize}, p)
			CMPQ(nb, U8(3))
			CMOVQCS(x.wp, p)
			_, x.between = x.gprScalesSteps(Mem{Base: p}, gA)
			x.preGS = gB
		}
		b := block(x, w2, []Mem{x.acts[0].Offset(x.q45pSize())})
		x.finishMins2(a, b)
		ADDQ(U32(2*wsize), x.wp)
		ADDQ(U32(2*x.q45pSize()), ap)
		SUBQ(U8(2), nb)
		CMPQ(nb, U8(2))
		JAE(LabelRef("loop" + fn))
		Label("one" + fn)
		TESTQ(nb, nb)
		JZ(LabelRef("done" + fn))
		fetch(1)
		if x.q4v {
			x.preGS = gA.again()
		}
		x.finishMins1(block(x, Mem{Base: x.wp}, x.acts))
	} else {
		TESTQ(nb, nb)
		JZ(LabelRef("done" + fn))
		Label("loop" + fn)
		fetch(1)
		if m == 1 {
			x.finishMins1(block(x, Mem{Base: x.wp}, x.acts))
		} else {
			x.finishMins4(block(x, Mem{Base: x.wp}, x.acts))
		}
		ADDQ(U32(wsize), x.wp)
		ADDQ(U32(x.q45pSize()), ap)
		DECQ(nb)
		JNZ(LabelRef("loop" + fn))
	}
	Label("done" + fn)
	if tile {
		VMOVUPS(x.sums[0], Mem{Base: accp})
		VEXTRACTPS(U8(2), x.sumf, Mem{Base: accp, Disp: 32})
		VZEROUPPER()
		RET()
		return
	}
	if x.sumfMem != nil {
		VMOVUPS(*x.sumfMem, x.sumf)
	}
	var outp Register
	if m > 1 {
		outp = Load(Param("out"), GP64())
	}
	var res VecVirtual
	for k := range m {
		lane := k
		if m == 1 {
			lane = 2
		}
		s := XMM()
		VSHUFPS(U8(0x55*lane), x.sumf, x.sumf, s) // the row's sumf into lane 0
		x.addLanes(x.sums[k], s)
		switch {
		case m == 1:
			Store(s, ReturnIndex(0))
		case k == 0:
			res = s
		default:
			VINSERTPS(U8(k<<4), s, res, res)
		}
	}
	if m > 1 {
		// One store: the caller's 16-byte load of out would wait for four
		// narrow stores to retire (no store forwarding).
		VMOVUPS(res, Mem{Base: outp})
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

// kmins is one block's minimum part before its reduction: per row, the
// eight int32 lanes whose sum is sumi, and the block's fp16 d, dmin as
// float32 (hd) with, for one row, their products with y.d (dd: d, dmin).
type kmins struct {
	prods  []VecVirtual
	hd, dd VecVirtual
	sumi   VecVirtual // compact four rows: the rows' sumi, an xmm (q4mm.go)
}

// pairSum adds the eight int32 lanes of a and of b (ymm) into dword 0 and
// 1 of every 128-bit lane of the result: a transpose, then adds.
func (x *xk) pairSum(a, b VecVirtual) VecVirtual {
	lo, hi := YMM(), YMM()
	VPUNPCKLDQ(b, a, lo)
	VPUNPCKHDQ(b, a, hi)
	VPADDD(hi, lo, lo)
	return lo
}

// finishMins2 does sumf -= dmin*float(sumi) for two consecutive blocks of
// one row, in order; sumf is lane 2 of x.sumf.
func (x *xk) finishMins2(a, b kmins) {
	var h VecVirtual
	if a.prods[0].Size() == 16 {
		// Four dwords a block (q4v): a0+a2, b0+b2, a1+a3, b1+b3.
		h = XMM()
		lo := XMM()
		VPUNPCKLDQ(b.prods[0], a.prods[0], lo)
		VPUNPCKHDQ(b.prods[0], a.prods[0], h)
		VPADDD(lo, h, h)
	} else {
		p := x.pairSum(a.prods[0], b.prods[0]) // dwords a', b', a'', b''
		h = x.extract128(p)
		VPADDD(p.AsX(), h, h)
	}
	s := XMM()
	VPSHUFD(U8(0x4e), h, s)
	VPADDD(s, h, h) // lanes 2, 3: sumi of a, b
	VCVTDQ2PS(h, h)
	dm := XMM()
	VUNPCKLPS(b.dd, a.dd, dm) // d_a, d_b, dmin_a, dmin_b
	VMULPS(h, dm, dm)
	VSUBPS(dm, x.sumf, x.sumf)
	VMOVSHDUP(dm, dm) // lane 2: block b's
	VSUBPS(dm, x.sumf, x.sumf)
}

// finishMins1 is finishMins2 for one block.
func (x *xk) finishMins1(a kmins) {
	p := a.prods[0]
	h := p
	if p.Size() != 16 {
		h = x.extract128(p)
		VPADDD(p.AsX(), h, h)
	}
	s := XMM()
	VPSHUFD(U8(0x4e), h, s)
	VPADDD(s, h, h)
	VPSHUFD(U8(0xb1), h, s)
	VPADDD(s, h, h)
	VCVTDQ2PS(h, h)
	dm := XMM()
	VUNPCKLPS(a.dd, a.dd, dm) // lane 2: dmin
	VMULPS(h, dm, dm)
	VSUBPS(dm, x.sumf, x.sumf)
}

// finishMins4 does sumf -= dmin*float(sumi) for the four rows of one
// block: lane k of sumf is row k's.
func (x *xk) finishMins4(a kmins) {
	if x.compact {
		x.q4mmFinishMins(a)
		return
	}
	p := a.prods
	t01, t23 := x.pairSum(p[0], p[1]), x.pairSum(p[2], p[3])
	lo, hi := YMM(), YMM()
	VPUNPCKLQDQ(t23, t01, lo)
	VPUNPCKHQDQ(t23, t01, hi)
	VPADDD(hi, lo, lo)
	sumi := x.extract128(lo)
	VPADDD(lo.AsX(), sumi, sumi)
	VCVTDQ2PS(sumi, sumi)
	yd := XMM()
	VMOVSS(x.acts[0].Offset(x.q45pD()), yd)
	for k := 1; k < len(x.acts); k++ {
		VINSERTPS(U8(k<<4), x.acts[k].Offset(x.q45pD()), yd, yd)
	}
	x.subMins(sumi, yd, a.hd)
}

// subMins does sumf -= dmin*sumi for four rows, lane k row k's: sumi
// their float sums, yd their activation d, hd the block's half d pair
// (dmin in the high half).
func (x *xk) subMins(sumi, yd, hd VecVirtual) {
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

// block emits one block's integer work for every activation row in acts
// and sums[l] += d*float(aux32[l]); it returns the minimum part for
// finishMins. quants(i) returns vector i of the block's permuted unsigned
// quants (one sub-block per 256 bits); nacc integer accumulators per row
// hide VPDPWSSD's latency.
func (x *xk) block(wp Mem, acts []Mem, nacc int, quants func(i int) VecVirtual) kmins {
	t := x.t
	var scb VecVirtual
	var gs *gprScale
	if x.preGS != nil {
		gs, x.preGS = x.preGS, nil
	} else if x.table != nil {
		gs = x.gprScales(wp)
	} else {
		scb = t.k4Scales(wp)
	}
	km := kmins{hd: halfs(wp, true)} // fp16 d, dmin as float32
	if len(acts) == 1 {
		km.dd = XMM()
		VBROADCASTSS(acts[0].Offset(x.q45pD()), km.dd)
		VMULPS(km.hd, km.dd, km.dd)
	}
	sums := make([]*isumAcc, len(acts))
	for k := range sums {
		sums[k] = t.newIsum(nacc)
	}
	for i := 0; i < 256/t.w; i++ {
		u := quants(i)
		var s VecVirtual
		switch {
		case gs != nil && t.vnni && len(acts) == 1:
			// The scale as VPDPWSSD's embedded broadcast of its entry.
			m := gs.next()
			a := sums[0]
			r := a.n % len(a.regs)
			if a.n < len(a.regs) {
				a.regs[r] = t.vec()
				t.zero(a.regs[r])
			}
			a.n++
			y := x.q45pProducts(acts[0], i, u)
			Instruction(&ir.Instruction{
				Opcode: "VPDPWSSD", Suffixes: []string{"BCST"},
				Operands: []Op{m, y, a.regs[r]}, Inputs: []Op{m, y, a.regs[r]},
				Outputs: []Op{a.regs[r]}, ISA: []string{"AVX512_VNNI"},
			})
			x.runBetween(i)
			continue
		case gs != nil:
			s = t.vec()
			VPBROADCASTD(gs.next(), s)
		default:
			s = t.vec()
			VPSHUFB(t.scaleIndex(32).Offset(i*t.w), scb, s)
		}
		for k, a := range acts {
			y := x.q45pProducts(a, i, u)
			sums[k].add(y, s)
		}
	}
	x.runBetween(-1)
	var fd VecVirtual
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
		d := YMM()
		if km.dd != nil {
			VBROADCASTSS(km.dd, d)
		} else {
			if fd == nil {
				fd = YMM()
				VBROADCASTSS(km.hd, fd)
			}
			VBROADCASTSS(x.q4mmD(acts, k), d)
			VMULPS(fd, d, d) // fp16(d) * y.d, as the reference rounds it
		}
		VMULPS(d, y, y)
		VADDPS(y, x.sums[k], x.sums[k])
	}

	// The minimums' integer part, sum_j bsums[j]*mins[j/2], per row: after
	// the products, whose chains are the longer ones.
	if x.compact {
		km.sumi = x.q4mmMins(gs, scb)
		return km
	}
	if x.q4v && gs != nil && len(acts) == 1 {
		// The eight mins as words times the eight pair sums (q45pPairs):
		// 128 bits, whose four dwords finishMins reduces in fewer steps.
		mw := XMM()
		VMOVQ(gs.m, mw)
		VPMOVZXBW(mw, mw)
		p := XMM()
		VPMADDWD(acts[0].Offset(q45pPairs), mw, p)
		km.prods = append(km.prods, p)
		return km
	}
	var mw VecVirtual
	if gs != nil {
		mw = gs.mins()
	} else {
		mw = YMM()
		var dup []byte
		for j := 0; j < 16; j++ {
			dup = append(dup, byte(8+j/2), 0x80)
		}
		VPSHUFB(constData("k4mdup", dup), scb.AsY(), mw)
	}
	for _, a := range acts {
		p := YMM()
		VPMADDWD(a.Offset(x.q45pBsums()), mw, p)
		km.prods = append(km.prods, p)
	}
	return km
}

// genExactK emits the one-row kernel (two integer accumulators per row)
// and the four-row one (one each), on Q8_K rows, then both on prepared
// rows (one row: q45prep.go, and its tile form; four, MatMul's: q4mm.go).
// body emits one block.
func genExactK(t *target, name string, wsize int, pre func(x *xk), body func(x *xk, wp Mem, acts []Mem, nacc int) kmins) {
	one := func(x *xk, wp Mem, acts []Mem) kmins { return body(x, wp, acts, 2) }
	four := func(x *xk, wp Mem, acts []Mem) kmins { return body(x, wp, acts, 1) }
	if q4vGen {
		q45Loop(t, name, wsize, 1, true, false, pre, one)
		q45Loop(t, name, wsize, 1, true, true, pre, one)
		return
	}
	q45Loop(t, name, wsize, 1, false, false, pre, one)
	q45Loop(t, name, wsize, 4, false, false, pre, four)
	q45Loop(t, name, wsize, 1, true, false, pre, one)
	q45Loop(t, name, wsize, 1, true, true, pre, one)
	q45Loop(t, name, wsize, 4, true, false, pre, four)
}

// q4Quants returns vector i of the permuted 4-bit quants at qs (Q4_K's
// layout: each 32 bytes hold two sub-blocks, low nibbles first); q caches
// the permuted bytes between the two nibbles on 256-bit targets.
func (x *xk) q4Quants(i int, qs Mem, q *VecVirtual, c0F Op) VecVirtual {
	t := x.t
	u := t.vec()
	if t.zmm() {
		p := x.perm.load32(qs.Offset(32 * i))
		vshift(0, -4, p, u)
	} else {
		if i%2 == 0 {
			*q = x.perm.load32(qs.Offset(32 * (i / 2)))
			t.and(c0F, *q, u)
			return u
		}
		if x.vbmi {
			// GFNI: bit b of each byte of the result is bit b+4 of the
			// source byte (an affine map over GF(2)), shift and mask in one.
			var m Op = gfHiNib()
			if x.gfm != nil {
				m = x.gfm
			}
			Instruction(&ir.Instruction{
				Opcode: "VGF2P8AFFINEQB", Operands: []Op{U8(0), m, *q, u},
				Inputs: []Op{m, *q}, Outputs: []Op{u}, ISA: []string{"GFNI"},
			})
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
	genExactK(t, "Q4K", 144, pre, func(x *xk, wp Mem, acts []Mem, nacc int) kmins {
		var q VecVirtual
		return x.block(wp, acts, nacc, func(i int) VecVirtual {
			return x.q4Quants(i, wp.Offset(16), &q, c0F)
		})
	})
}

func genQ5KExact(t *target) {
	var c0F, c10 Op
	pre := func(x *xk) { c0F, c10 = t.konst(0x0f0f0f0f), t.konst(0x10101010) }
	genExactK(t, "Q5K", 176, pre, func(x *xk, wp Mem, acts []Mem, nacc int) kmins {
		var q, qh VecVirtual
		return x.block(wp, acts, nacc, func(i int) VecVirtual {
			if i == 0 {
				qh = x.perm.load32(wp.Offset(16))
			}
			u := x.q4Quants(i, wp.Offset(48), &q, c0F)
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

// scaleWords is a table of 64 dwords, entry s holding s in both words:
// what VPDPWSSD multiplies the word pairs of a sub-block scaled by s with.
func scaleWords() Mem {
	var b []byte
	for v := 0; v < 64; v++ {
		b = append(b, byte(v), 0, byte(v), 0)
	}
	return constData("k4scalewords", b)
}

// gprScale is a block's scales and mins unpacked into integer registers
// (gprScales): two words of four scale bytes, and the eight min bytes.
type gprScale struct {
	x      *xk
	sc     [2]Register
	m      Register
	served int
}

// next emits the index of the next sub-block's scale and returns its
// scaleWords entry, for a broadcast: sub-blocks in order.
func (g *gprScale) next() Mem {
	i := g.served
	g.served++
	src := g.sc[i/4]
	r := GP64()
	if i%4 < 3 {
		MOVBQZX(src.(GPVirtual).As8(), r)
		SHRL(U8(8), src)
	} else {
		MOVL(src, r.As32())
	}
	return Mem{Base: g.x.table, Index: r, Scale: 4}
}

// mins returns the mins as sixteen words m[j/2], for VPMADDWD with the
// sixteen bsums.
func (g *gprScale) mins() VecVirtual {
	xm := XMM()
	VMOVQ(g.m, xm)
	mw := YMM()
	VPBROADCASTQ(xm, mw)
	var dup []byte
	for j := 0; j < 16; j++ {
		dup = append(dup, byte(j%8/2+4*(j/8)), 0x80)
	}
	VPSHUFB(constData("k4mdupq", dup), mw, mw)
	return mw
}

// gprScales unpacks a block's 6-bit scales and mins (get_scale_min_k4)
// with integer instructions, which leaves the vector units to the
// products. With a0, a1, a2 the three little-endian words at wp+4,
// bytewise:
//
//	sc[0:4] = a0&0x3f   sc[4:8] = a2&0x0f | (a0>>2)&0x30
//	m[0:4]  = a1&0x3f   m[4:8]  = (a2>>4)&0x0f | (a1>>2)&0x30
func (x *xk) gprScales(wp Mem) *gprScale {
	a0, a1, a2 := GP32(), GP32(), GP32()
	MOVL(wp.Offset(4), a0)
	MOVL(wp.Offset(8), a1)
	MOVL(wp.Offset(12), a2)
	sl, sh := GP32(), GP32()
	MOVL(a0, sl)
	ANDL(U32(0x3f3f3f3f), sl)
	MOVL(a2, sh)
	ANDL(U32(0x0f0f0f0f), sh)
	SHRL(U8(2), a0)
	ANDL(U32(0x30303030), a0)
	ORL(a0, sh)
	ml, mh := GP64(), GP64()
	MOVL(a1, ml.As32())
	ANDL(U32(0x3f3f3f3f), ml.As32())
	SHRL(U8(4), a2)
	ANDL(U32(0x0f0f0f0f), a2)
	SHRL(U8(2), a1)
	ANDL(U32(0x30303030), a1)
	ORL(a1, a2)
	MOVL(a2, mh.As32())
	SHLQ(U8(32), mh)
	ORQ(mh, ml)
	return &gprScale{x: x, sc: [2]Register{sl, sh}, m: ml}
}

// again returns g's registers as a fresh gprScale, its scales served from
// the first.
func (g *gprScale) again() *gprScale { return &gprScale{x: g.x, sc: g.sc, m: g.m} }

// runBetween emits the step x.between holds for vector i, or for i < 0
// all that are left.
func (x *xk) runBetween(i int) {
	if i >= 0 {
		if i < len(x.between) && x.between[i] != nil {
			x.between[i]()
			x.between[i] = nil
		}
		return
	}
	for _, f := range x.between {
		if f != nil {
			f()
		}
	}
	x.between = nil
}

// gprScalesSteps is gprScales of the block at w as steps, for another
// block to emit between its vectors (runBetween), into into's registers
// where into is non-nil. It holds fewer registers at once than
// gprScales: the mins end in a0's, the high scales in a2's.
func (x *xk) gprScalesSteps(w Mem, into *gprScale) (*gprScale, []func()) {
	a0, a1, a2 := GP32(), GP32(), GP32()
	sl, t := GP32(), GP64()
	if into != nil {
		sl, a2 = into.sc[0].(GPVirtual), into.sc[1].(GPVirtual)
		a0 = into.m.(GPVirtual).As32().(GPVirtual)
	}
	steps := []func(){
		func() {
			MOVL(w.Offset(4), a0)
			MOVL(w.Offset(12), a2)
			MOVL(a0, sl)
		},
		func() {
			ANDL(U32(0x3f3f3f3f), sl) // sc[0:4]
			SHRL(U8(2), a0)
			ANDL(U32(0x30303030), a0)
		},
		func() {
			MOVL(a2, t.As32())
			SHRL(U8(4), t.As32())
			ANDL(U32(0x0f0f0f0f), t.As32())
		},
		func() {
			ANDL(U32(0x0f0f0f0f), a2)
			ORL(a0, a2) // sc[4:8]
			MOVL(w.Offset(8), a1)
		},
		func() {
			MOVL(a1, a0)
			ANDL(U32(0x3f3f3f3f), a0) // m[0:4]
			SHRL(U8(2), a1)
		},
		func() {
			ANDL(U32(0x30303030), a1)
			ORL(a1, t.As32()) // m[4:8]
			SHLQ(U8(32), t)
		},
		func() {
			ORQ(t, a0.As64())
		},
	}
	return &gprScale{x: x, sc: [2]Register{sl, a2}, m: a0.As64()}, steps
}
