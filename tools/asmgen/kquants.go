package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The K-quant · Q8_K dot products. Each weight block is unpacked into
// unsigned 8-bit quants in element order, one vector (32 or 64 elements) at
// a time; VPMADDUBSW multiplies them with the signed activations into int16
// pairs (no saturation is possible: |q| <= 63 and |y| <= 128), and those
// are multiplied by the 16-bit sub-block scale of each 16-element lane and
// summed into int32 lanes (VPMADDWD, or VPDPWSSD with VNNI). The integer
// sum of a block is therefore exact, as in ggml's reference; only the float
// accumulation across blocks and lanes differs in order.
//
// Offsets that a signed quant needs (Q3_K's -4, Q6_K's -32) are not applied
// per element: sum(s*(q-o)*y) = sum(s*q*y) - o*sum_sub(s*bsum), using the
// per-16 sums Q8_K carries, so the weights stay unsigned for VPMADDUBSW.
// Minimums (Q2_K, Q4_K, Q5_K) use the same bsums.

const (
	q8KSize  = 292
	q8KQs    = 4
	q8KBsums = 260
)

// kctx is what a K-quant block body works with: the weight block pointer,
// the block base of each of the m activation rows, and their accumulators.
type kctx struct {
	t    *target
	wp   Register
	acts []Mem
	acc  []VecVirtual // float sums, full width
	accm []VecVirtual // subtracted parts, ymm: acc itself for 256-bit targets
	dw   VecVirtual   // the weight block's fp16 scale(s) as float32, xmm lanes 0 (and 1)
	yd   VecVirtual   // single-row kernels: ydot(0), computed once per block
}

// kLoop emits the dot product of one weight row with m activation rows:
//
//	m == 1: dot<name><suffix>(w, a *byte, nb int) float32
//	m > 1:  dot<name>x<m><suffix>(w, a *byte, nb, astride int, out *float32)
//
// where activation row k starts at a + k*astride and out[k] receives its
// result. The weight block is unpacked once for all m rows. body emits one
// block; pre the loop-invariant constants. A row's float operations are the
// same whatever m is, so every m gives bit-identical results.
func kLoop(t *target, name string, wsize, m int, pre func(), body func(c *kctx)) {
	fn := "dot" + name + t.suffix
	sig := "func(w, a *byte, nb int) float32"
	if m > 1 {
		fn = "dot" + name + "x" + string(rune('0'+m)) + t.suffix
		sig = "func(w, a *byte, nb, astride int, out *float32)"
	}
	TEXT(fn, NOSPLIT, sig)
	Pragma("noescape")
	c := &kctx{t: t, wp: Load(Param("w"), GP64())}
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
	for k := 0; k < m; k++ {
		a := t.vec()
		t.zerof(a)
		c.acc = append(c.acc, a)
		am := a
		if t.zmm() {
			am = YMM()
			t.zerof(am)
		}
		c.accm = append(c.accm, am)
	}
	t.memConsts = m > 1
	pre()
	t.memConsts = false
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	c.yd = nil
	body(c)
	ADDQ(U32(wsize), c.wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	var outp Register
	if m > 1 {
		outp = Load(Param("out"), GP64())
	}
	for k := 0; k < m; k++ {
		s := t.hsum(c.acc[k])
		if t.zmm() {
			VADDSS(t.hsumY(c.accm[k]), s, s)
		}
		if m == 1 {
			Store(s, ReturnIndex(0))
		} else {
			VMOVSS(s, Mem{Base: outp, Disp: 4 * k})
		}
	}
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}

// genK emits a K-quant kernel for one row (two integer accumulators per
// block, to hide VPDPWSSD latency) and for four rows (one each).
func genK(t *target, name string, wsize int, pre func(), body func(c *kctx, nacc int)) {
	kLoop(t, name, wsize, 1, pre, func(c *kctx) { body(c, 2) })
	kLoop(t, name, wsize, 4, pre, func(c *kctx) { body(c, 1) })
}

// ydot returns activation row k's fp16-scale product with the weight
// scale(s) in c.dw: lanes 0 (and 1) of an xmm.
func (c *kctx) ydot(k int) VecVirtual {
	// One row keeps it in a register; four recompute it (no register to
	// spare), which costs a load and a multiply.
	if len(c.acts) == 1 && c.yd != nil {
		return c.yd
	}
	y := XMM()
	if len(c.acts) == 1 {
		c.yd = y
	}
	VBROADCASTSS(c.acts[k], y)
	VMULPS(c.dw, y, y)
	return y
}

// subtract adds -(factor << shift)·sum_j(s_j·bsum_j) into row k, where sw
// holds the sixteen 16-bit per-sub-block factors s_j (a ymm, kept) and
// factor is lane `lane` of c.ydot(k).
func (c *kctx) subtract(k int, sw VecVirtual, shift, lane int) {
	p := YMM()
	VPMADDWD(c.acts[k].Offset(q8KBsums), sw, p)
	if shift > 0 {
		VPSLLD(U8(shift), p, p)
	}
	VCVTDQ2PS(p, p)
	f := YMM()
	src := c.ydot(k)
	if lane == 1 {
		hi := XMM()
		VMOVSHDUP(src, hi)
		src = hi
	}
	VBROADCASTSS(src, f)
	VFNMADD231PS(p, f, c.accm[k].AsY())
}

// isumAcc sums scaled int16 pairs into int32 lanes over one or more
// registers (two hide VPDPWSSD's latency within a block); the first use of
// each register is a plain VPMADDWD.
type isumAcc struct {
	t    *target
	regs []VecVirtual
	n    int
}

func (t *target) newIsum(k int) *isumAcc { return &isumAcc{t: t, regs: make([]VecVirtual, k)} }

func (a *isumAcc) add(p, s VecVirtual) {
	i := a.n % len(a.regs)
	if a.n < len(a.regs) {
		a.regs[i] = a.t.vec()
		VPMADDWD(s, p, a.regs[i])
	} else {
		a.t.dotw(p, s, a.regs[i])
	}
	a.n++
}

// addBytes adds the products of unsigned bytes u and the signed bytes at y,
// four per int32 lane (VPDPBUSD).
func (a *isumAcc) addBytes(u VecVirtual, y Mem) {
	i := a.n % len(a.regs)
	if a.n < len(a.regs) {
		a.regs[i] = a.t.vec()
		a.t.zero(a.regs[i])
	}
	vnniOp("VPDPBUSD", y, u, a.regs[i])
	a.n++
}

func (a *isumAcc) sum() VecVirtual {
	for _, r := range a.regs[1:] {
		VPADDD(r, a.regs[0], a.regs[0])
	}
	return a.regs[0]
}

// runs emits the integer part of a block: for each vector i of quants
// (quants(i), unsigned bytes) and its 16-bit scales (scales(i)), the
// VPMADDUBSW with every activation row, scaled and summed per row; then
// each row's sum times its block scale (lane 0 of c.ydot) into acc.
func (c *kctx) runs(nacc int, quants func(i int) VecVirtual, scales func(i int) VecVirtual) {
	t := c.t
	sums := make([]*isumAcc, len(c.acts))
	for k := range sums {
		sums[k] = t.newIsum(nacc)
	}
	for i := 0; i < 256/t.w; i++ {
		u := quants(i)
		s := scales(i)
		for k, a := range c.acts {
			p := t.vec()
			VPMADDUBSW(a.Offset(q8KQs+i*t.w), u, p)
			sums[k].add(p, s)
		}
	}
	for k, sum := range sums {
		isum := sum.sum()
		VCVTDQ2PS(isum, isum)
		d := t.vec()
		VBROADCASTSS(c.ydot(k), d)
		VFMADD231PS(isum, d, c.acc[k])
	}
}

// mov loads a vector of any width; EVEX needs the explicit element size.
func (t *target) mov(m Mem, dst Op) {
	if t.evex() {
		VMOVDQU64(m, dst)
	} else {
		VMOVDQU(m, dst)
	}
}

// halfs loads the fp16 value(s) at m as float32 into an xmm: two adjacent
// ones when both fit inside the block, else one.
func halfs(m Mem, two bool) VecVirtual {
	x := XMM()
	if two {
		VMOVD(m, x)
	} else {
		VPBROADCASTW(m, x)
	}
	VCVTPH2PS(x, x)
	return x
}

func genQ2K(t *target) {
	var c0F, c03 Op
	pre := func() { c0F, c03 = t.konst(0x0f0f0f0f), t.konst(0x03030303) }
	genK(t, "Q2K", 84, pre, func(c *kctx, nacc int) {
		wp := c.wp
		c.dw = halfs(Mem{Base: wp, Disp: 80}, true) // d, dmin
		// Minimums: 16 high nibbles times the 16 bsums.
		mx := XMM()
		t.mov(Mem{Base: wp}, mx)
		VPSRLW(U8(4), mx, mx)
		t.and(asX(c0F), mx, mx)
		mw := YMM()
		VPMOVZXBW(mx, mw)
		for k := range c.acts {
			c.subtract(k, mw, 0, 1)
		}
		if t.vnni && len(c.acts) > 1 {
			// Building the tables pays off only over several rows.
			q2KProducts(c, nacc, c0F, c03)
			return
		}
		scb := t.vec()
		t.bcast16(Mem{Base: wp}, scb)
		t.and(c0F, scb, scb)
		idx := t.scaleIndex(16)
		var q VecVirtual
		c.runs(nacc, func(i int) VecVirtual {
			return t.twoBit(i, Mem{Base: wp, Disp: 16}, &q, c03)
		}, func(i int) VecVirtual {
			s := t.vec()
			VPSHUFB(idx.Offset(i*t.w), scb, s)
			return s
		})
	})
}

// q2KProducts is Q2_K's integer part with VNNI. A 2-bit quant times a
// 4-bit scale fits a byte (at most 45), so it is looked up rather than
// multiplied: each sub-block gets a 4-byte table [0, s, 2s, 3s], VPSHUFB
// maps the quants through their lane's table, and one VPDPBUSD per vector
// and activation row does the rest, instead of VPMADDUBSW+VPDPWSSD.
func q2KProducts(c *kctx, nacc int, c0F, c03 Op) {
	t, wp := c.t, c.wp
	s1, s2, s3 := XMM(), XMM(), XMM()
	t.mov(Mem{Base: wp}, s1)
	t.and(asX(c0F), s1, s1)
	VPADDB(s1, s1, s2)
	VPADDB(s1, s2, s3)
	z := XMM()
	VPXORD(z, z, z)
	// tables[g] holds the tables of sub-blocks 4g..4g+3, 4 bytes each.
	var tables [4]VecVirtual
	for h := 0; h < 2; h++ {
		a, b := XMM(), XMM()
		if h == 0 {
			VPUNPCKLBW(s1, z, a)  // 0 s
			VPUNPCKLBW(s3, s2, b) // 2s 3s
		} else {
			VPUNPCKHBW(s1, z, a)
			VPUNPCKHBW(s3, s2, b)
		}
		tables[2*h], tables[2*h+1] = XMM(), XMM()
		VPUNPCKLWD(b, a, tables[2*h])
		VPUNPCKHWD(b, a, tables[2*h+1])
	}
	// The index of a quant in its lane's register: q + 4*(sub-block % 4).
	var off []byte
	for l := 0; l < 16; l++ {
		for k := 0; k < 16; k++ {
			off = append(off, byte(4*(l%4)))
		}
	}
	offs := constData("q2koff", off)
	sums := make([]*isumAcc, len(c.acts))
	for k := range sums {
		sums[k] = t.newIsum(nacc)
	}
	var q, lut VecVirtual
	for i := 0; i < 256/t.w; i++ {
		u := t.vec()
		if t.zmm() {
			k, j := i/2, 2*(i%2)
			if i%2 == 0 {
				q = t.vec()
				t.load32(Mem{Base: wp, Disp: 16 + 32*k}, q)
			}
			vshift(-2*j, -2*j-2, q, u)
			lut = t.vec()
			VSHUFI64X2(U8(0), tables[i].AsZ(), tables[i].AsZ(), lut)
		} else {
			k, j := i/4, i%4
			if j == 0 {
				q = t.vec()
				t.load32(Mem{Base: wp, Disp: 16 + 32*k}, q)
			}
			t.shiftBits(-2*j, q, u)
			if i%2 == 0 {
				lut = t.vec()
				VPERMQ(U8(0x44), tables[i/2].AsY(), lut)
			}
		}
		VPTERNLOGD(U8(0xea), offs.Offset(i*t.w), c03, u) // u&3 | off
		VPSHUFB(u, lut, u)
		for k, a := range c.acts {
			sums[k].addBytes(u, a.Offset(q8KQs+i*t.w))
		}
	}
	for k, sum := range sums {
		isum := sum.sum()
		VCVTDQ2PS(isum, isum)
		d := t.vec()
		VBROADCASTSS(c.ydot(k), d)
		VFMADD231PS(isum, d, c.acc[k])
	}
}

func genQ3K(t *target) {
	var c32, c03, c04 Op
	pre := func() { c32, c03, c04 = t.konst(0x00200020), t.konst(0x03030303), t.konst(0x04040404) }
	genK(t, "Q3K", 110, pre, func(c *kctx, nacc int) {
		wp := c.wp
		c.dw = halfs(Mem{Base: wp, Disp: 108}, false)
		scb := t.q3KScales(wp)
		// -4 * sum(s_j*bsum_j), with s_j the unbiased scale.
		sw := YMM()
		VPMOVZXBW(scb.AsX(), sw)
		VPSUBW(asY(c32), sw, sw)
		for k := range c.acts {
			c.subtract(k, sw, 2, 0)
		}
		swLo, swHi := t.halfScales(sw)
		idx := wordIndex()
		hm := t.vec()
		t.load32(Mem{Base: wp}, hm)
		var q VecVirtual
		c.runs(nacc, func(i int) VecVirtual {
			u := t.twoBit(i, Mem{Base: wp, Disp: 32}, &q, c03)
			if t.evex() {
				// Bit r of hmask is the third bit of run r: add 4 where set.
				m := K()
				VPTESTMB(t.runBits(i), hm, m)
				VPADDB(c04, u, m, u)
				return u
			}
			// Bit r of hmask is the third bit of run r: move it to bit 2.
			h := t.vec()
			if t.zmm() {
				if i == 0 {
					vshift(2, 1, hm, h)
				} else {
					vshift(-(2*i - 2), -(2*i - 1), hm, h)
				}
			} else {
				t.shiftBits(2-i, hm, h)
			}
			t.and(c04, h, h)
			t.or(h, u, u)
			return u
		}, func(i int) VecVirtual {
			s := t.vec()
			VPSHUFB(idx.Offset(i*t.w), pick(i*t.w < 128, swLo, swHi), s)
			return s
		})
	})
}

func genQ6K(t *target) {
	var c0F, c30 Op
	pre := func() { c0F, c30 = t.konst(0x0f0f0f0f), t.konst(0x30303030) }
	genK(t, "Q6K", 210, pre, func(c *kctx, nacc int) {
		wp := c.wp
		c.dw = halfs(Mem{Base: wp, Disp: 208}, false)
		// -32 * sum(s_j*bsum_j).
		sw := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: 192}, sw)
		for k := range c.acts {
			c.subtract(k, sw, 5, 0)
		}
		swLo, swHi := t.halfScales(sw)
		idx := wordIndex()
		var ql, qh VecVirtual
		var qls [2]VecVirtual
		c.runs(nacc, func(i int) VecVirtual {
			lo, hb := t.vec(), t.vec()
			if t.zmm() {
				h, sub := i/2, i%2
				if sub == 0 {
					ql = t.vec()
					t.mov(Mem{Base: wp, Disp: 64 * h}, ql)
					qh = t.vec()
					t.load32(Mem{Base: wp, Disp: 128 + 32*h}, qh)
					t.and(c0F, ql, lo)
					vshift(4, 2, qh, hb)
				} else {
					VPSRLW(U8(4), ql, lo)
					t.and(c0F, lo, lo)
					vshift(0, -2, qh, hb)
				}
			} else {
				// The four-row kernel reloads ql (it has no two registers
				// to spare); the single-row one keeps it, being load-bound.
				h, j := i/4, i%4
				if j == 0 {
					qh = t.vec()
					t.load32(Mem{Base: wp, Disp: 128 + 32*h}, qh)
				}
				switch {
				case len(c.acts) > 1:
					t.load32(Mem{Base: wp, Disp: 64*h + 32*(j%2)}, lo)
					if j >= 2 {
						VPSRLW(U8(4), lo, lo)
					}
				case j < 2:
					qls[j] = t.vec()
					t.load32(Mem{Base: wp, Disp: 64*h + 32*j}, qls[j])
					t.copyv(qls[j], lo)
				default:
					VPSRLW(U8(4), qls[j-2], lo)
				}
				t.and(c0F, lo, lo)
				t.shiftBits(4-2*j, qh, hb)
			}
			t.and(c30, hb, hb)
			t.or(hb, lo, lo)
			return lo
		}, func(i int) VecVirtual {
			s := t.vec()
			VPSHUFB(idx.Offset(i*t.w), pick(i*t.w < 128, swLo, swHi), s)
			return s
		})
	})
}

// k4Body emits the parts Q4_K and Q5_K share: the scale unpack, the
// minimum term, and the runs; quants(i) returns vector i's unsigned quants.
func k4Body(c *kctx, nacc int, quants func(i int) VecVirtual) {
	t, wp := c.t, c.wp
	c.dw = halfs(Mem{Base: wp}, true) // d, dmin
	scb := t.k4Scales(wp)
	// Each min covers two bsums: the min of bsum j is byte 8+j/2.
	mw := YMM()
	var dup []byte
	for j := 0; j < 16; j++ {
		dup = append(dup, byte(8+j/2), 0x80)
	}
	VPSHUFB(constData("k4mdup", dup), scb.AsY(), mw)
	for k := range c.acts {
		c.subtract(k, mw, 0, 1)
	}
	idx := t.scaleIndex(32)
	c.runs(nacc, quants, func(i int) VecVirtual {
		s := t.vec()
		VPSHUFB(idx.Offset(i*t.w), scb, s)
		return s
	})
}

func genQ4K(t *target) {
	var c0F Op
	pre := func() { c0F = t.konst(0x0f0f0f0f) }
	genK(t, "Q4K", 144, pre, func(c *kctx, nacc int) {
		var q VecVirtual
		k4Body(c, nacc, func(i int) VecVirtual {
			return t.nibbles(i, Mem{Base: c.wp, Disp: 16}, &q, c0F)
		})
	})
}

func genQ5K(t *target) {
	var c0F, c10 Op
	pre := func() { c0F, c10 = t.konst(0x0f0f0f0f), t.konst(0x10101010) }
	genK(t, "Q5K", 176, pre, func(c *kctx, nacc int) {
		qh := t.vec()
		t.load32(Mem{Base: c.wp, Disp: 16}, qh)
		var q VecVirtual
		k4Body(c, nacc, func(i int) VecVirtual {
			u := t.nibbles(i, Mem{Base: c.wp, Disp: 48}, &q, c0F)
			if t.evex() {
				// Bit r of qh is the fifth bit of run r: add 16 where set.
				m := K()
				VPTESTMB(t.runBits(i), qh, m)
				VPADDB(c10, u, m, u)
				return u
			}
			// Bit r of qh is the fifth bit of run r: move it to bit 4.
			h := t.vec()
			if t.zmm() {
				r := 2 * i
				if r < 4 {
					vshift(4-r, 3-r, qh, h)
				} else {
					vshift(-(r - 4), -(r - 3), qh, h)
				}
			} else {
				t.shiftBits(4-i, qh, h)
			}
			t.and(c10, h, h)
			t.or(h, u, u)
			return u
		})
	})
}

func pick(first bool, a, b VecVirtual) VecVirtual {
	if first {
		return a
	}
	return b
}

// runBits is, for vector i of a block, a constant whose bytes hold the bit
// that selects the vector's element run (32 elements) in a per-element
// bitmap such as Q3_K's hmask or Q5_K's qh: 1<<i for a 256-bit vector,
// 1<<2i and 1<<(2i+1) in the halves of a 512-bit one.
func (t *target) runBits(i int) Mem {
	var b []byte
	for r := 0; r < 8; r++ {
		for k := 0; k < 32; k++ {
			b = append(b, 1<<r)
		}
	}
	return constData("runbits", b).Offset(i * t.w)
}
