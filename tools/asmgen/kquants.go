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

// kLoop emits a function dot<name><suffix>(w, a *byte, nb int) float32 that
// runs body once per block. body adds the block's scaled sum into acc and
// the part to subtract (minimums, offsets) into accm (a ymm).
func kLoop(t *target, name string, wsize int, pre func(), body func(wp, ap Register, acc, accm VecVirtual)) {
	TEXT("dot"+name+t.suffix, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	acc := t.vec()
	t.zero(acc)
	accm := YMM()
	VXORPS(accm, accm, accm)
	pre() // loop-invariant constants
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	body(wp, ap, acc, accm)
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	s := t.hsum(acc)
	m := hsumY(accm)
	VSUBSS(m, s, s)
	Store(s, ReturnIndex(0))
	RET()
}

// mov loads a vector of any width; EVEX needs the explicit element size.
func (t *target) mov(m Mem, dst Op) {
	if t.zmm() {
		VMOVDQU64(m, dst)
	} else {
		VMOVDQU(m, dst)
	}
}

func (t *target) xor(src2, src1, dst Op) {
	if t.zmm() {
		VPXORD(src2, src1, dst)
	} else {
		VPXOR(src2, src1, dst)
	}
}

// isumAcc sums scaled int16 pairs into int32 lanes over several
// registers, so that a chain of VPDPWSSD (latency 4-5) does not serialise a
// block; the first use of each register is a plain VPMADDWD.
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

func (a *isumAcc) sum() VecVirtual {
	for _, r := range a.regs[1:] {
		VPADDD(r, a.regs[0], a.regs[0])
	}
	return a.regs[0]
}

// finishInt adds isum (int32 lanes) times the block scale into acc.
func finishInt(isum, d, acc VecVirtual) {
	VCVTDQ2PS(isum, isum)
	VFMADD231PS(isum, d, acc)
}

// subtractSums adds c*sum_j(s_j*bsum_j) * dscale into accm, where sw holds
// the sixteen 16-bit per-sub-block factors s_j (a ymm) and c = 1<<shift.
func subtractSums(sw VecVirtual, ap Register, shift int, dscale, accm VecVirtual) {
	VPMADDWD(Mem{Base: ap, Disp: q8KBsums}, sw, sw)
	if shift > 0 {
		VPSLLD(U8(shift), sw, sw)
	}
	VCVTDQ2PS(sw, sw)
	VFMADD231PS(sw, dscale.AsY(), accm)
}

// twoBit returns element vector i of a block whose 2-bit quants are packed
// as Q2_K/Q3_K's qs (32 bytes per 128 elements, bits 2j..2j+1 for element
// run j): the quants as bytes in [0, 3]. q caches the loaded qs.
func (t *target) twoBit(i int, qs Mem, q *VecVirtual, c03 VecVirtual) VecVirtual {
	u := t.vec()
	if t.zmm() {
		k, j := i/2, 2*(i%2)
		if i%2 == 0 {
			*q = t.vec()
			t.load32(qs.Offset(32*k), *q)
		}
		vshift(-2*j, -2*j-2, *q, u)
	} else {
		k, j := i/4, i%4
		if j == 0 {
			*q = t.vec()
			t.load32(qs.Offset(32*k), *q)
		}
		shiftBits(-2*j, *q, u)
	}
	t.and(c03, u, u)
	return u
}

func genQ2K(t *target) {
	var c0F, c03 VecVirtual
	pre := func() { c0F, c03 = t.splat(0x0f0f0f0f), t.splat(0x03030303) }
	kLoop(t, "Q2K", 84, pre, func(wp, ap Register, acc, accm VecVirtual) {
		D := halfPair(Mem{Base: wp, Disp: 80}, Mem{Base: ap})
		// Minimums: 16 high nibbles times the 16 bsums.
		mx := XMM()
		t.mov(Mem{Base: wp}, mx)
		VPSRLW(U8(4), mx, mx)
		t.and(c0F.AsX(), mx, mx)
		mw := YMM()
		VPMOVZXBW(mx, mw)
		subtractSums(mw, ap, 0, t.bcastLane(D, 1), accm)

		scb := t.vec()
		t.bcast16(Mem{Base: wp}, scb)
		t.and(c0F, scb, scb)
		idx := t.scaleIndex(16)
		isum := t.newIsum(2)
		var q VecVirtual
		for i := 0; i < 256/t.w; i++ {
			u := t.twoBit(i, Mem{Base: wp, Disp: 16}, &q, c03)
			p := t.vec()
			VPMADDUBSW(Mem{Base: ap, Disp: q8KQs + i*t.w}, u, p)
			s := t.vec()
			VPSHUFB(idx.Offset(i*t.w), scb, s)
			isum.add(p, s)
		}
		finishInt(isum.sum(), t.bcastLane(D, 0), acc)
	})
}

// laneConst returns a constant of the target's width whose every 128-bit
// lane holds the four dwords d.
func (t *target) laneConst(name string, d [4]uint32) Mem {
	var b []byte
	for l := 0; l < t.w/16; l++ {
		for _, v := range d {
			b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
	}
	return constData(name+map[int]string{32: "_y", 64: "_z"}[t.w], b)
}

// q3KScales unpacks Q3_K's twelve bytes of 6-bit scales (biased by 32)
// into 16 bytes, in every 128-bit lane of the result, as ggml's kmask
// shuffle does:
//
//	s[0:4]   = a0&0x0f | (t<<4)&0x30     s[4:8]   = a1&0x0f | (t<<2)&0x30
//	s[8:12]  = a0>>4&0x0f | t&0x30       s[12:16] = a1>>4&0x0f | (t>>2)&0x30
//
// with a0, a1, t the three little-endian words.
func (t *target) q3KScales(wp Register) VecVirtual {
	v := t.vec()
	t.bcast16(Mem{Base: wp, Disp: 94}, v) // 94..109: ends with the block
	x, y := t.vec(), t.vec()
	// The words start at byte 2 of v.
	VPSHUFB(t.laneConst("q3a", [4]uint32{0x05040302, 0x09080706, 0x05040302, 0x09080706}), v, x)
	VPSRLVD(t.laneConst("q3ash", [4]uint32{0, 0, 4, 4}), x, x)
	t.and(t.laneConst("q3am", [4]uint32{0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f}), x, x)
	VPSHUFB(t.laneConst("q3t", [4]uint32{0x0d0c0b0a, 0x0d0c0b0a, 0x0d0c0b0a, 0x0d0c0b0a}), v, y)
	VPSLLVD(t.laneConst("q3tl", [4]uint32{4, 2, 0, 0}), y, y)
	VPSRLVD(t.laneConst("q3tr", [4]uint32{0, 0, 0, 2}), y, y)
	t.and(t.laneConst("q3tm", [4]uint32{0x30303030, 0x30303030, 0x30303030, 0x30303030}), y, y)
	t.or(y, x, x)
	return x
}

// bcastX copies the xmm x into every 128-bit lane of a full-width register.
func (t *target) bcastX(x VecVirtual) VecVirtual {
	r := t.vec()
	if t.zmm() {
		VSHUFI64X2(U8(0), x.AsZ(), x.AsZ(), r)
	} else {
		VPERMQ(U8(0x44), x.AsY(), r)
	}
	return r
}

func genQ3K(t *target) {
	var c32, c03, c04 VecVirtual
	pre := func() { c32, c03, c04 = t.splat(0x00200020), t.splat(0x03030303), t.splat(0x04040404) }
	kLoop(t, "Q3K", 110, pre, func(wp, ap Register, acc, accm VecVirtual) {
		Dv := t.bcastLane(halfOne(Mem{Base: wp, Disp: 108}, Mem{Base: ap}), 0)
		scb := t.q3KScales(wp)
		// -4 * sum(s_j*bsum_j), with s_j the unbiased scale.
		sw := YMM()
		VPMOVZXBW(scb.AsX(), sw)
		VPSUBW(c32.AsY(), sw, sw)
		subtractSums(sw, ap, 2, Dv, accm)

		idx := t.scaleIndex(16)
		hm := t.vec()
		t.load32(Mem{Base: wp}, hm)
		isum := t.newIsum(2)
		var q VecVirtual
		for i := 0; i < 256/t.w; i++ {
			u := t.twoBit(i, Mem{Base: wp, Disp: 32}, &q, c03)
			// Bit r of hmask is the third bit of run r: move it to bit 2.
			h := t.vec()
			if t.zmm() {
				if i == 0 {
					vshift(2, 1, hm, h)
				} else {
					vshift(-(2*i - 2), -(2*i - 1), hm, h)
				}
			} else {
				shiftBits(2-i, hm, h)
			}
			t.and(c04, h, h)
			t.or(h, u, u)
			p := t.vec()
			VPMADDUBSW(Mem{Base: ap, Disp: q8KQs + i*t.w}, u, p)
			s := t.vec()
			VPSHUFB(idx.Offset(i*t.w), scb, s)
			VPSUBW(c32, s, s)
			isum.add(p, s)
		}
		finishInt(isum.sum(), Dv, acc)
	})
}

func genQ6K(t *target) {
	var c80, c128, c0F, c30 VecVirtual
	pre := func() {
		c80, c128 = t.splat(0x80808080), t.splat(0x00800080)
		c0F, c30 = t.splat(0x0f0f0f0f), t.splat(0x30303030)
	}
	kLoop(t, "Q6K", 210, pre, func(wp, ap Register, acc, accm VecVirtual) {
		Dv := t.bcastLane(halfOne(Mem{Base: wp, Disp: 208}, Mem{Base: ap}), 0)
		// -32 * sum(s_j*bsum_j).
		sw := YMM()
		VPMOVSXBW(Mem{Base: wp, Disp: 192}, sw)
		subtractSums(sw, ap, 5, Dv, accm)

		// Signed scales through VPSHUFB's zero extension: bias by 128 first.
		scb := t.vec()
		t.bcast16(Mem{Base: wp, Disp: 192}, scb)
		t.xor(c80, scb, scb)
		idx := t.scaleIndex(16)
		isum := t.newIsum(2)
		var ql [2]VecVirtual
		var qh VecVirtual
		for i := 0; i < 256/t.w; i++ {
			lo, hb := t.vec(), t.vec()
			if t.zmm() {
				h, sub := i/2, i%2
				if sub == 0 {
					ql[0] = t.vec()
					t.mov(Mem{Base: wp, Disp: 64 * h}, ql[0])
					qh = t.vec()
					t.load32(Mem{Base: wp, Disp: 128 + 32*h}, qh)
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
					qh = t.vec()
					t.load32(Mem{Base: wp, Disp: 128 + 32*h}, qh)
				}
				if j < 2 {
					ql[j] = t.vec()
					t.load32(Mem{Base: wp, Disp: 64*h + 32*j}, ql[j])
					t.and(c0F, ql[j], lo)
				} else {
					VPSRLW(U8(4), ql[j-2], lo)
					t.and(c0F, lo, lo)
				}
				shiftBits(4-2*j, qh, hb)
			}
			t.and(c30, hb, hb)
			t.or(hb, lo, lo)
			p := t.vec()
			VPMADDUBSW(Mem{Base: ap, Disp: q8KQs + i*t.w}, lo, p)
			s := t.vec()
			VPSHUFB(idx.Offset(i*t.w), scb, s)
			VPSUBW(c128, s, s)
			isum.add(p, s)
		}
		finishInt(isum.sum(), Dv, acc)
	})
}

// k4Scales unpacks the 12-byte 6-bit scale/min table of Q4_K and Q5_K (at
// wp+4) into eight scale bytes then eight min bytes (get_scale_min_k4 for
// j = 0..7), in every 128-bit lane of the result. With a0, a1, a2 the three
// little-endian words:
//
//	sc[0:4] = a0&0x3f   sc[4:8] = a2&0x0f | (a0>>2)&0x30
//	m[0:4]  = a1&0x3f   m[4:8]  = (a2>>4)&0x0f | (a1>>2)&0x30
func (t *target) k4Scales(wp Register) VecVirtual {
	v := t.vec()
	t.bcast16(Mem{Base: wp, Disp: 4}, v)
	x, y := t.vec(), t.vec()
	VPSHUFD(U8(0x98), v, x) // a0 a2 a1 a2
	VPSRLVD(t.laneConst("k4sh", [4]uint32{0, 0, 0, 4}), x, x)
	t.and(t.laneConst("k4m", [4]uint32{0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f}), x, x)
	VPSHUFD(U8(0x50), v, y) // a0 a0 a1 a1
	VPSRLD(U8(2), y, y)
	t.and(t.laneConst("k4hm", [4]uint32{0, 0x30303030, 0, 0x30303030}), y, y)
	t.or(y, x, x)
	return x
}

// k4Common emits the parts Q4_K and Q5_K share: the scale unpack, the
// minimum term, and the per-vector loop; quants(i) returns vector i's
// unsigned quants.
func k4Common(t *target, wp, ap Register, acc, accm VecVirtual, quants func(i int) VecVirtual) {
	D := halfPair(Mem{Base: wp}, Mem{Base: ap})
	scb := t.k4Scales(wp)
	// Each min covers two bsums: the min of bsum j is byte 8+j/2.
	mw := YMM()
	var dup []byte
	for j := 0; j < 16; j++ {
		dup = append(dup, byte(8+j/2), 0x80)
	}
	VPSHUFB(constData("k4mdup", dup), scb.AsY(), mw)
	subtractSums(mw, ap, 0, t.bcastLane(D, 1), accm)
	idx := t.scaleIndex(32)
	isum := t.newIsum(2)
	for i := 0; i < 256/t.w; i++ {
		u := quants(i)
		p := t.vec()
		VPMADDUBSW(Mem{Base: ap, Disp: q8KQs + i*t.w}, u, p)
		s := t.vec()
		VPSHUFB(idx.Offset(i*t.w), scb, s)
		isum.add(p, s)
	}
	finishInt(isum.sum(), t.bcastLane(D, 0), acc)
}

// nibbles returns vector i of a Q4_K-style nibble array at qs (32 bytes per
// 64 elements: low nibbles first, then high): the 4-bit quants as bytes.
func (t *target) nibbles(i int, qs Mem, q *VecVirtual, c0F VecVirtual) VecVirtual {
	u := t.vec()
	if t.zmm() {
		q := t.vec()
		t.load32(qs.Offset(32*i), q)
		vshift(0, -4, q, u)
	} else {
		k, s := i/2, i%2
		if s == 0 {
			*q = t.vec()
			t.load32(qs.Offset(32*k), *q)
			t.and(c0F, *q, u)
			return u
		}
		VPSRLW(U8(4), *q, u)
	}
	t.and(c0F, u, u)
	return u
}

func genQ4K(t *target) {
	var c0F VecVirtual
	pre := func() { c0F = t.splat(0x0f0f0f0f) }
	kLoop(t, "Q4K", 144, pre, func(wp, ap Register, acc, accm VecVirtual) {
		var q VecVirtual
		k4Common(t, wp, ap, acc, accm, func(i int) VecVirtual {
			return t.nibbles(i, Mem{Base: wp, Disp: 16}, &q, c0F)
		})
	})
}

func genQ5K(t *target) {
	var c0F, c10 VecVirtual
	pre := func() { c0F, c10 = t.splat(0x0f0f0f0f), t.splat(0x10101010) }
	kLoop(t, "Q5K", 176, pre, func(wp, ap Register, acc, accm VecVirtual) {
		qh := t.vec()
		t.load32(Mem{Base: wp, Disp: 16}, qh)
		var q VecVirtual
		k4Common(t, wp, ap, acc, accm, func(i int) VecVirtual {
			u := t.nibbles(i, Mem{Base: wp, Disp: 48}, &q, c0F)
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
				shiftBits(4-i, qh, h)
			}
			t.and(c10, h, h)
			t.or(h, u, u)
			return u
		})
	})
}
