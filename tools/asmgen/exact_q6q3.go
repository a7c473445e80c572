package main

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q3_K and Q6_K, bit for bit as ggml's generic code: it sums a block into
// eight int32 lanes, lane l taking the elements whose index is l mod 8
// (aux32[l]), then adds d·aux32[l] into eight float lanes (multiply,
// round, add, round) and sums those eight lanes in order at the end.
//
// Integers add exactly in any order, so only the lanes matter. Every
// 32-element run of weights and activations is permuted into the byte
// order [0 8 16 24, 1 9 17 25, ..., 7 15 23 31]: VPMADDUBSW then pairs
// elements l and l+8 of the run's first sub-block (16 elements, one scale)
// and l+16, l+24 of its second, and VPMADDWD/VPDPWSSD with the scale words
// [s_first, s_second] in every dword leaves lane l's share in dword l.
// With AVX512_VBMI the permutation is one VPERMB; otherwise VPERMD (dwords
// 0 2 4 6 | 1 3 5 7, giving each 128-bit lane the residues it holds) and
// an in-lane VPSHUFB transpose. The weights are permuted as packed bytes,
// before their bit fields are pulled apart: every run of a packed vector
// has its elements at the same byte positions.
//
// The quants' offsets (-32, -4) go per lane too: VPMADDUBSW of the offset
// with the same permuted activations, subtracted before the scales.

// xctx is what an exact K-quant block body works with.
type xctx struct {
	t     *target
	vbmi  bool
	prep  bool // activations in kernelkit's prepared layout (q63Prep*)
	wp    Register
	acts  []Mem
	facc  []Op         // eight float lanes per row: ymm, or a stack slot
	perm  *runPerm     // every 32-byte run into lane order
	stack Mem          // 256-bit targets: the block's scale words
	sidx  []VecVirtual // 512-bit targets: VPERMD indexes picking scale dwords
	dw    VecVirtual   // fp16 block scale as float32, xmm lane 0
	yd    VecVirtual   // one row: its d, computed once per block
	jobs  *[]lrJob     // non-nil: block records its work here instead of emitting it (lrPair)
	q36   *q36Regs     // non-nil: the q36 variant (q36.go)
}

// ydot is fp16(x.d)·y.d of row k, as ggml computes d, in xmm lane 0.
func (c *xctx) ydot(k int) VecVirtual {
	if len(c.acts) == 1 && c.yd != nil {
		return c.yd
	}
	y := XMM()
	dOff := 0
	if c.prep {
		dOff = q63PrepD
	}
	VMULSS(c.acts[k].Offset(dOff), c.dw, y)
	if len(c.acts) == 1 {
		c.yd = y
	}
	return y
}

// xLoop emits an exact K-quant kernel with kLoop's signatures (m = 1 or
// 4 activation rows; tile kernels on prepared rows also 2 or 3); body
// emits one block.
func xLoop(t *target, name string, wsize, m int, vbmi, prep, tile bool, pre func(), body func(c *xctx, nacc int)) {
	if prep {
		name = strings.Replace(name, "K", "KP", 1)
	}
	fn := "dot" + name + t.suffix
	sig := "func(w, a *byte, nb int) float32"
	if tile {
		fn = "lrDot" + name + "T" + t.suffix
		sig = "func(w, a *byte, nb int, acc *[9]float32, pf *byte)" // acc[8]: Q4_K/Q5_K's sumf, unused here
	}
	if m > 1 {
		fn = "dot" + name + "x" + string(rune('0'+m)) + t.suffix
		sig = "func(w, a *byte, nb, astride int, out *float32)"
		if tile {
			// Row k's eight lanes at acc[9k:9k+8].
			fn = "lrDot" + name + "x" + string(rune('0'+m)) + "T" + t.suffix
			sig = "func(w, a *byte, nb, astride int, acc *float32, pf *byte)"
		}
	}
	if q36Gen != nil {
		fn = q36Name(fn)
	}
	TEXT(fn, NOSPLIT, sig)
	Pragma("noescape")
	c := &xctx{t: t, vbmi: vbmi, prep: prep, wp: Load(Param("w"), GP64())}
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	c.acts = []Mem{{Base: ap}}
	if m > 1 {
		s := Load(Param("astride"), GP64())
		c.acts = append(c.acts, Mem{Base: ap, Index: s, Scale: 1}, Mem{Base: ap, Index: s, Scale: 2})
		if m > 3 {
			s3 := GP64()
			LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
			c.acts = append(c.acts, Mem{Base: ap, Index: s3, Scale: 1})
		}
		c.acts = c.acts[:m]
	}
	// A 256-bit kernel without EVEX has 16 registers: four rows keep their
	// float lanes on the stack.
	inMem := m > 1 && !t.evex()
	var slots Mem
	if inMem {
		slots = AllocLocal(32 * m)
	}
	if !t.zmm() {
		size := 32
		if q36Gen != nil {
			size = 128 // lrPair's two sets of two blocks' scale words
		}
		c.stack = AllocLocal(size)
	}
	var accp Register
	if tile {
		accp = Load(Param("acc"), GP64())
	}
	for k := 0; k < m; k++ {
		if inMem {
			z := YMM()
			VXORPS(z, z, z)
			VMOVUPS(z, slots.Offset(32*k))
			c.facc = append(c.facc, slots.Offset(32*k))
			continue
		}
		a := YMM()
		if tile {
			VMOVUPS(Mem{Base: accp, Disp: 36 * k}, a)
		} else {
			t.zerof(a)
		}
		c.facc = append(c.facc, a)
	}
	c.perm = newRunPerm(t, vbmi, false)
	if t.zmm() {
		for i := 0; i < 4; i++ {
			var b []byte
			for e := 0; e < 16; e++ {
				b = append(b, byte(2*i+e/8), 0, 0, 0)
			}
			r := t.vec()
			t.mov(constData(fmt.Sprintf("xsidx%d", i), b), r)
			c.sidx = append(c.sidx, r)
		}
	}
	// 256-bit EVEX kernels on prepared rows pick each vector's scale
	// dwords with VPERMD from eight index registers: broadcasting them
	// from a stack copy of the block's scales waits on store-to-load
	// forwarding (measured: ~10% slower).
	// 256-bit EVEX kernels on one prepared row run two blocks at a time,
	// their vectors interleaved (lrPair; measured +1-4% on Zen 4).
	pair := prep && t.evex() && !t.zmm() && m == 1
	if q36Gen != nil {
		c.q36 = q36Gen(t)
	} else if prep && t.evex() && !t.zmm() {
		for i := 0; i < 8; i++ {
			c.sidx = append(c.sidx, t.splat(uint32(i)))
		}
	}
	t.memConsts = m > 1
	pre()
	t.memConsts = false
	var pf Register
	if tile {
		pf = Load(Param("pf"), GP64())
	}
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))

	if pair {
		lrPair(c, fn, nb, wsize, ap, pf, body)
	}
	Label("loop" + fn)
	if tile {
		// The caller interleaves weight rows a tile at a time, which the
		// hardware prefetchers do not follow: each block fetches its share
		// of the weights to come, at pf, into L2 (kernelkit's tiledRange),
		// and this row's two blocks ahead into L1 (measured on Zen 4,
		// 16384x7168 Q6_K: 25.6 GB/s, 20 without the second).
		tileFetch(pf, c.wp, 1, wsize)
	}
	c.yd = nil
	body(c, map[bool]int{true: 1, false: 2}[m > 1])
	ADDQ(U32(wsize), c.wp)
	if prep {
		ADDQ(U32(q63PrepBlock), ap)
	} else {
		ADDQ(U32(q8KSize), ap)
	}
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	if tile {
		accp = Load(Param("acc"), GP64())
		for k := range m {
			VMOVUPS(c.facc[k], Mem{Base: accp, Disp: 36 * k})
		}
		VZEROUPPER()
		RET()
		return
	}
	var outp Register
	if m > 1 {
		outp = Load(Param("out"), GP64())
	}
	for k := 0; k < m; k++ {
		s := lanesInOrder(t, c.facc[k])
		if m == 1 {
			Store(s, ReturnIndex(0))
		} else {
			VMOVSS(s, Mem{Base: outp, Disp: 4 * k})
		}
	}
	VZEROUPPER()
	RET()
}

// lanesInOrder sums the eight float lanes of acc one after the other, as
// ggml's final loop does (starting from lane 0 rather than from +0: the
// lanes are sums that began at +0, so none is -0 and 0+lane0 == lane0).
func lanesInOrder(t *target, acc Op) VecVirtual {
	v := YMM()
	if m, ok := acc.(Mem); ok {
		VMOVUPS(m, v)
	} else {
		v = acc.(VecVirtual)
	}
	lo, hi := Op(v.AsX()), XMM()
	if t.evex() {
		VEXTRACTF32X4(U8(1), v, hi)
	} else {
		VEXTRACTF128(U8(1), v, hi)
	}
	s := XMM()
	first := true
	for _, x := range []Op{lo, hi} {
		if first {
			VMOVAPS(x, s)
			first = false
		} else {
			VADDSS(x, s, s)
		}
		a, b, d := XMM(), XMM(), XMM()
		VMOVSHDUP(x, a)
		VADDSS(a, s, s)
		VMOVHLPS(x, x, b)
		VADDSS(b, s, s)
		VPSHUFD(U8(0xff), x, d)
		VADDSS(d, s, s)
	}
	return s
}

// block emits the integer and float work of one block for every row:
// quants(i) is vector i of the permuted unsigned quants, coff the quants'
// offset in every byte (a register), sw the sixteen signed 16-bit scales
// (a ymm).
func (c *xctx) block(nacc int, coff Op, sw VecVirtual, quants func(i int) VecVirtual) {
	t := c.t
	var scale func(i int) VecVirtual
	if t.zmm() {
		scale = func(i int) VecVirtual {
			s := t.vec()
			VPERMD(sw.AsZ(), c.sidx[i], s)
			return s
		}
	} else if c.sidx == nil && c.q36 == nil {
		t.movStore(sw, c.stack)
		scale = func(i int) VecVirtual {
			s := t.vec()
			VPBROADCASTD(c.stack.Offset(4*i), s)
			return s
		}
	}
	// One 256-bit VNNI row takes its scales straight from the stack, as
	// an embedded broadcast.
	bcst := t.vnni && !t.zmm() && len(c.acts) == 1
	if c.q36 != nil {
		bcst = c.q36.stored
		c.q36.stored = false
	} else if !t.zmm() && c.sidx != nil {
		bcst = false
		scale = func(i int) VecVirtual {
			s := t.vec()
			VPERMD(sw, c.sidx[i], s)
			return s
		}
	}
	sums := make([]*isumAcc, len(c.acts))
	for k := range sums {
		sums[k] = t.newIsum(nacc)
		if bcst {
			for r := range sums[k].regs {
				sums[k].regs[r] = t.vec()
				t.zero(sums[k].regs[r])
			}
			sums[k].n = nacc
		}
	}
	step := func(i int) {
		u := quants(i)
		var s VecVirtual
		if !bcst {
			s = scale(i)
		}
		if bcst && len(c.acts) > 1 {
			// Several rows: the scale dword broadcast once for all.
			s = t.vec()
			VPBROADCASTD(c.stack.Offset(4*i), s)
		}
		for k, a := range c.acts {
			p := t.vec()
			if c.prep {
				VPMADDUBSW(a.Offset(i*t.w), u, p)
				VPSUBW(a.Offset(q63PrepOff+i*t.w), p, p)
			} else {
				y := c.perm.perm(a.Offset(q8KQs + i*t.w))
				VPMADDUBSW(y, u, p)
				VPMADDUBSW(y, coff, y)
				VPSUBW(y, p, p)
			}
			if bcst && len(c.acts) > 1 {
				vnniOp("VPDPWSSD", s, p, sums[k].regs[i%nacc])
				continue
			}
			if bcst {
				vnniOp("VPDPWSSD.BCST", c.stack.Offset(4*i), p, sums[k].regs[i%nacc])
				continue
			}
			sums[k].add(p, s)
		}
	}
	finish := func() { c.finish(sums) }
	if c.jobs != nil {
		*c.jobs = append(*c.jobs, lrJob{step, finish})
		return
	}
	for i := 0; i < 256/t.w; i++ {
		step(i)
	}
	finish()
}

// finish converts the block's integer lane sums and adds them, times d,
// into each row's float lanes.
func (c *xctx) finish(sums []*isumAcc) {
	t := c.t
	for k, sum := range sums {
		isum := sum.sum()
		iy := isum.AsY()
		if t.zmm() {
			hi := YMM()
			VEXTRACTI64X4(U8(1), isum.AsZ(), hi)
			iy = YMM()
			VPADDD(hi, isum.AsY(), iy)
		}
		f := YMM()
		VCVTDQ2PS(iy, f)
		d := YMM()
		VBROADCASTSS(c.ydot(k), d)
		VMULPS(d, f, f)
		if m, ok := c.facc[k].(Mem); ok {
			VADDPS(m, f, f)
			VMOVUPS(f, m)
		} else {
			VADDPS(f, c.facc[k], c.facc[k])
		}
	}
}

// movStore stores a ymm.
func (t *target) movStore(v VecVirtual, m Mem) {
	if t.evex() {
		VMOVDQU64(v.AsY(), m)
	} else {
		VMOVDQU(v.AsY(), m)
	}
}

// lowOr sets lo = lo | (hb & mask): one VPTERNLOGD with EVEX.
func (t *target) lowOr(mask, hb, lo VecVirtual) {
	if t.evex() {
		VPTERNLOGD(U8(0xf8), mask, hb, lo)
		return
	}
	t.and(mask, hb, hb)
	t.or(hb, lo, lo)
}

func genQ6KExact(t *target, vbmi bool) {
	name := "Q6K"
	if vbmi {
		name += "VBMI"
	}
	var c0F, c30, c32 VecVirtual
	pre := func() { c0F, c30, c32 = t.splat(0x0f0f0f0f), t.splat(0x30303030), t.splat(0x20202020) }
	q6sw := func(wp Register) VecVirtual {
		sw := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: 192}, sw)
		return sw
	}
	for _, km := range q63Kinds {
		prep, m := km.prep, km.m
		xLoop(t, name, 210, m, vbmi, prep, km.tile, pre, func(c *xctx, nacc int) {
			wp := c.wp
			c.dw = halfs(Mem{Base: wp, Disp: 208}, false)
			var sw VecVirtual
			if c.q36 != nil {
				c.q36.scalesTo(wp, c.stack)
			} else {
				sw = q6sw(wp)
			}
			var ql [2]VecVirtual
			var qh, qa, qb VecVirtual
			c.block(nacc, c32, sw, func(i int) VecVirtual {
				if t.evex() {
					return q6KQuantsEVEX(c, i, c0F, &ql, &qa, &qb)
				}
				lo, hb := t.vec(), t.vec()
				if t.zmm() {
					h, sub := i/2, i%2
					if sub == 0 {
						ql[0] = c.perm.perm(Mem{Base: wp, Disp: 64 * h})
						qh = c.perm.load32(Mem{Base: wp, Disp: 128 + 32*h})
						t.and(c0F, ql[0], lo)
						vshift(4, 2, qh, hb)
					} else {
						VPSRLW(U8(4), ql[0], lo)
						t.and(c0F, lo, lo)
						vshift(0, -2, qh, hb)
					}
				} else {
					h, j := i/4, i%4
					if j == 0 {
						ql[0] = c.perm.perm(Mem{Base: wp, Disp: 64 * h})
						ql[1] = c.perm.perm(Mem{Base: wp, Disp: 64*h + 32})
						qh = c.perm.perm(Mem{Base: wp, Disp: 128 + 32*h})
					}
					if j < 2 {
						t.and(c0F, ql[j], lo)
					} else {
						VPSRLW(U8(4), ql[j-2], lo)
						t.and(c0F, lo, lo)
					}
					t.shiftBits(4-2*j, qh, hb)
				}
				t.lowOr(c30, hb, lo)
				return lo
			})
		})
	}
}

// q6KQuantsEVEX is vector i of a Q6_K block with VPTERNLOGD: the quant is
// a bit select, low nibble from ql (shifted for runs 2 and 3) and high
// bits from qh. qh is split once into the fields of runs 0 and 2 (0x33)
// and of runs 1 and 3 (0xcc), so that each run's field shifted into bits
// 4..5 has zeros above it.
func q6KQuantsEVEX(c *xctx, i int, c0F VecVirtual, ql *[2]VecVirtual, qa, qb *VecVirtual) VecVirtual {
	t, wp := c.t, c.wp
	hb := t.vec()
	var lo VecVirtual
	if t.zmm() {
		// Vector i holds runs 2i%4 and 2i%4+1 of half i/2 in its halves.
		h, sub := i/2, i%2
		if sub == 0 {
			ql[0] = c.perm.perm(Mem{Base: wp, Disp: 64 * h})
			qh := c.perm.load32(Mem{Base: wp, Disp: 128 + 32*h})
			*qa = t.vec()
			t.and(t.halvesConst(0x33333333, 0xcccccccc), qh, *qa)
			vshift(4, 2, *qa, hb)
			lo = ql[0]
		} else {
			vshift(0, -2, *qa, hb)
			lo = t.vec()
			VPSRLW(U8(4), ql[0], lo)
		}
	} else {
		h, j := i/4, i%4
		if j == 0 {
			ql[0] = c.perm.perm(Mem{Base: wp, Disp: 64 * h})
			ql[1] = c.perm.perm(Mem{Base: wp, Disp: 64*h + 32})
			qh := c.perm.perm(Mem{Base: wp, Disp: 128 + 32*h})
			if c.q36 != nil {
				*qa = qh
			} else {
				*qa, *qb = t.vec(), t.vec()
				VPANDD_BCST(constU32(0x33333333), qh, *qa)
				VPANDD_BCST(constU32(0xcccccccc), qh, *qb)
			}
		}
		if c.q36 != nil {
			return q36Q6Quant(c.q36, j, ql, *qa, c0F)
		}
		switch j {
		case 0:
			VPSLLW(U8(4), *qa, hb)
		case 1:
			VPSLLW(U8(2), *qb, hb)
		case 2:
			hb = *qa
		case 3:
			VPSRLW(U8(2), *qb, hb)
		}
		lo = ql[j%2]
		if j >= 2 {
			lo = t.vec()
			VPSRLW(U8(4), ql[j-2], lo)
		}
	}
	// hb = c0F ? lo : hb
	VPTERNLOGD(U8(0xd8), c0F, lo, hb)
	return hb
}

// halvesConst is a full-width constant with lo in every dword of the low
// 256 bits and hi in the high ones.
func (t *target) halvesConst(lo, hi uint32) Mem {
	var b []byte
	for i := 0; i < t.w/4; i++ {
		v := lo
		if i >= 8 {
			v = hi
		}
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return constData(fmt.Sprintf("halves%d_%08x_%08x", t.w, lo, hi), b)
}

func genQ3KExact(t *target, vbmi bool) {
	name := "Q3K"
	if vbmi {
		name += "VBMI"
	}
	if t.w == 32 && !vbmi {
		q63GenPrep(t) // once per plugin: avx2, or vnni256 among the AVX-512 targets
	}
	var c03, c04 VecVirtual
	var c32w Op
	pre := func() { c03, c04, c32w = t.splat(0x03030303), t.splat(0x04040404), t.konst(0x00200020) }
	q3sw := func(wp Register) VecVirtual {
		scb := t.q3KScales(wp)
		sw := YMM()
		VPMOVZXBW(scb.AsX(), sw)
		VPSUBW(asY(c32w), sw, sw)
		return sw
	}
	for _, km := range q63Kinds {
		prep, m := km.prep, km.m
		xLoop(t, name, 110, m, vbmi, prep, km.tile, pre, func(c *xctx, nacc int) {
			wp := c.wp
			c.dw = halfs(Mem{Base: wp, Disp: 108}, false)
			var sw VecVirtual
			if c.q36 != nil {
				c.q36.scalesTo(wp, c.stack)
			} else {
				sw = q3sw(wp)
			}
			hm := c.perm.load32(Mem{Base: wp})
			var q VecVirtual
			c.block(nacc, c04, sw, func(i int) VecVirtual {
				u := t.vec()
				if t.zmm() {
					k, j := i/2, 2*(i%2)
					if i%2 == 0 {
						q = c.perm.load32(Mem{Base: wp, Disp: 32 + 32*k})
					}
					vshift(-2*j, -2*j-2, q, u)
				} else {
					k, j := i/4, i%4
					if j == 0 {
						q = c.perm.perm(Mem{Base: wp, Disp: 32 + 32*k})
					}
					if vbmi && t.evex() {
						var cm Op
						if c.q36 != nil {
							cm = c.q36.q3mats[i]
						}
						return lrQ3KQuantGFNI(i, j, q, hm, c03, cm)
					}
					t.shiftBits(-2*j, q, u)
				}
				t.and(c03, u, u)
				if t.evex() {
					// Bit r of hmask is the third bit of run r: add 4 where set.
					mk := K()
					VPTESTMB(t.runBits(i), hm, mk)
					VPADDB(c04, u, mk, u)
					return u
				}
				h := t.vec()
				t.shiftBits(2-i, hm, h)
				t.lowOr(c04, h, u)
				return u
			})
		})
	}
}

var lrAccs = 8

// tileFetch is a tile kernel's prefetch before its next k blocks of wsize
// bytes at wp: their share of the weights to come, at pf, into L2 (pf
// advances), and the row's own blocks two ahead into L1.
func tileFetch(pf, wp Register, k, wsize int) {
	for off := 0; off < k*wsize; off += 64 {
		PREFETCHT1(Mem{Base: pf, Disp: off})
	}
	for off := 0; off < k*wsize; off += 64 {
		PREFETCHT0(Mem{Base: wp, Disp: 2*wsize + off})
	}
	ADDQ(U32(k*wsize), pf)
}
