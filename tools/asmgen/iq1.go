package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ1_S and IQ1_M · Q8_K, bit for bit ggml_vec_dot_iq1_s_q8_K_generic and
// ggml_vec_dot_iq1_m_q8_K_generic (core/quant vecDotIQ1S, vecDotIQ1M).
// Per super-block the reference makes two integers, sumi (the scaled grid
// products) and sumi1/sumi2 (the scaled, signed activation sums the
// ±IQ1*_DELTA shift multiplies), then one float chain:
//
//	sumf += float32(d*d8) * (float32(sumi) + 0.125*float32(sumi1))
//
// The kernels make both integers exactly in int32 lanes and keep that
// chain. The grid (core/quant's iq1s_grid: eight int8 of -1, 0, 1 per
// entry) is gathered four qwords at a time, from a copy made at generate
// time with 1 added to every byte: g+1 in 0..2 is VPMADDUBSW's unsigned
// side against the activations as they are (-128 included), and
//
//	sum ls*g*q = sum ls*(g+1)*q - sum ls*bsum
//
// over each scale's run of 16 or 32 activations, the correction from the
// Q8_K block's bsums (exact sums of its quants in every Q8_K the quantizer
// makes; the TQ kernels rely on them too). IQ1_M folds its delta sums in:
// T = 8*sumi1 + sumi2 = sum ls*(8*grid + delta)*q is one product per
// weight byte, 8*(g+1) + (delta+1) in 0..18 (the grid copy holds
// 8*(g+1)), minus 9*sum ls*bsum; |T| < 9*15*128*256 < 2^24, so
// float32(T)*0.125 is exact and equals the reference's float32(sumi1) +
// 0.125*float32(sumi2), which rounds the same exact value once.
// VPMADDWD (VPDPWSSD) by the scale words scales and sums the int16 pairs.

const (
	iq1SSize = 50
	iq1MSize = 56
)

// iq1k holds an IQ1 kernel's invariants and accumulators.
type iq1k struct {
	t     *target
	grid  Register
	allK  Register // EVEX: every mask bit set, copied for each gather
	spill Mem
	acts  []Mem        // the activation rows' Q8_K blocks
	acc1  []VecVirtual // each row's int32 lanes of sumi (IQ1_M: of T) plus the bsum term
	// corr returns row j's int32 lanes of the bsum term to take from
	// acc1.
	corr func(j int) VecVirtual
}

// gather returns the four grid qwords at the dword indices in idx (an
// xmm). VPGATHERDQ reads its destination and mask: both are defined
// before the index, so that the allocator keeps the three apart (the
// instruction faults if any two are the same register).
func (k *iq1k) gather(idx func() VecVirtual) VecVirtual {
	g := YMM()
	k.t.zero(g)
	if k.t.evex() {
		m := K()
		KMOVW(k.allK, m)
		VPGATHERDQ(Mem{Base: k.grid, Index: idx(), Scale: 8}, m, g)
		return g
	}
	m := YMM()
	VPCMPEQD(m, m, m)
	VPGATHERDQ(m, Mem{Base: k.grid, Index: idx(), Scale: 8}, g)
	return g
}

// iq1Loop emits the kernel over rows (1 or 4) activation rows (actRows);
// body adds a super-block's integers into the accumulators (which start
// at zero) and returns its fp16 d as a float in the low lane of an xmm.
func iq1Loop(t *target, name string, rows, wsize int, grid Mem, body func(k *iq1k, wp Register) VecVirtual) {
	fn, wp, ap, nb, acts := actRows(t, name, rows)
	k := &iq1k{t: t, grid: GP64(), acts: acts}
	// The grid plus one in every byte.
	LEAQ(grid, k.grid)
	k.spill = AllocLocal(96)
	if t.evex() {
		// KXNORW reads its operands as far as avo knows: done once, not
		// per gather, so that only one mask register is live throughout.
		k.allK = K()
		KXNORW(k.allK, k.allK, k.allK)
	}
	sums := make([]VecVirtual, rows)
	for j := range sums {
		sums[j] = XMM()
		VXORPS(sums[j], sums[j], sums[j])
	}
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	zero := func() []VecVirtual {
		v := make([]VecVirtual, rows)
		for j := range v {
			v[j] = YMM()
			t.zero(v[j])
		}
		return v
	}
	k.acc1 = zero()
	d := body(k, wp)
	for j, a := range acts {
		c := k.corr(j)
		VPSUBD(c, k.acc1[j], k.acc1[j])
		f1 := hsumInt(t, k.acc1[j])
		// float32(T)*0.125 (T = 8*sumi + sumi1): exactly the reference's
		// float32(sumi) + IQ1*_DELTA*float32(sumi1) (genIQ1M, genIQ1S).
		VMULSS(constU32(0x3e000000), f1, f1)
		dd := XMM()
		VMULSS(a, d, dd) // d*d8
		VMULSS(dd, f1, f1)
		VADDSS(f1, sums[j], sums[j])
	}
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	storeRows(sums)
	VZEROUPPER()
	RET()
}

// bsumTerm returns the int32 lanes of VPMADDWD(row j's sixteen bsums, the
// 32 bytes of words at m).
func (k *iq1k) bsumTerm(j int, m Mem) VecVirtual {
	c, b := YMM(), YMM()
	k.t.mov(m, c)
	VPMADDWD(k.acts[j].Offset(260), c, b)
	return b
}

// iq1Dot adds group ib's unsigned weight bytes g times every row's 32
// activations into acc1, scaled by the words of l.
func (k *iq1k) iq1Dot(ib int, g VecVirtual, l VecVirtual) {
	for j, a := range k.acts {
		q := YMM()
		k.t.mov(a.Offset(4+32*ib), q)
		VPMADDUBSW(q, g, q)
		k.t.dotw(q, l, k.acc1[j])
	}
}

// iq1Indices returns the eight 11-bit grid indices of groups 8p..8p+7 of
// 8 weights: the qs bytes at qs, the high three bits of group j at bit
// shift[j] of the dword at hi.
func (k *iq1k) iq1Indices(qs, hi Mem, name string, shift [8]uint32) VecVirtual {
	idx, h := YMM(), YMM()
	VPMOVZXBD(qs, idx)
	VPBROADCASTD(hi, h)
	var b []byte
	for _, s := range shift {
		b = append(b, byte(s), 0, 0, 0)
	}
	VPSRLVD(constData(name, b), h, h)
	k.t.and(constVec(7), h, h)
	VPSLLD(U8(8), h, h)
	k.t.or(h, idx, idx)
	return idx
}

// iq1Groups runs the four pairs of 32-weight groups of a super-block:
// per pair the indices, then each group's gather and dot.
func (k *iq1k) iq1Groups(idx func(p int) VecVirtual, dot func(ib int, g VecVirtual)) {
	for p := 0; p < 4; p++ {
		ix := idx(p)
		dot(2*p, k.gather(func() VecVirtual { return ix.AsX().(VecVirtual) }))
		dot(2*p+1, k.gather(func() VecVirtual {
			h := XMM()
			if k.t.evex() {
				VEXTRACTI32X4(U8(1), ix, h)
			} else {
				VEXTRACTI128(U8(1), ix, h)
			}
			return h
		}))
	}
}

// lsWords turns dwords of scales ls (< 2^15) into ls|ls<<16.
func lsWords(t *target, ls VecVirtual) {
	w := YMM()
	VPSLLD(U8(16), ls, w)
	t.or(w, ls, ls)
}

// genIQ1S emits dotIQ1_S<suffix> and dotIQ1_Sx4<suffix>. The block: d |
// qs[32] | qh[8] uint16, one per 32 weights: the grid's high bits (3 a
// group, bits 0-11), ls' in bits 12-14 (ls = 2*ls'+1) and the delta's
// sign in bit 15. sumi1 is sum ls*delta*(bsums[2ib]+bsums[2ib+1]) of the
// Q8_K block's bsums, as the reference has it. As IQ1_M, the kernel makes
// T = 8*sumi + sumi1 (|T| < 2^24): sum ls*8*(g+1)*q against the grid copy
// holding 8*(g+1), minus sum ls*(8-delta)*(bsum pair), one VPMADDWD of the
// sixteen bsums; float32(T)*0.125 is the reference's float32(sumi) +
// 0.125*float32(sumi1) exactly.
func genIQ1S(t *target, rows int) {
	iq1Loop(t, "IQ1_S", rows, iq1SSize, gridData("iq1sGrid", 8, 2048, func(b byte) byte { return 8 * (b + 1) }), func(k *iq1k, wp Register) VecVirtual {
		qh := YMM()
		VPMOVZXWD(Mem{Base: wp, Disp: 34}, qh)
		ls := YMM()
		VPSRLD(U8(12), qh, ls)
		t.and(constVec(7), ls, ls)
		VPADDD(ls, ls, ls)
		t.or(constVec(1), ls, ls)
		m, sd := YMM(), YMM()
		VPSLLD(U8(16), qh, m)
		VPSRAD(U8(31), m, m)
		if t.evex() {
			VPXORD(m, ls, sd)
		} else {
			VPXOR(m, ls, sd)
		}
		VPSUBD(m, sd, sd) // ls*delta
		// The correction: ls*(8-delta) = 8*ls - ls*delta a bsum pair.
		c := YMM()
		VPSLLD(U8(3), ls, c)
		VPSUBD(sd, c, c)
		lsWords(t, c)
		t.movStore(c, k.spill.Offset(64))
		lsWords(t, ls)
		t.movStore(ls, k.spill)
		k.corr = func(j int) VecVirtual { return k.bsumTerm(j, k.spill.Offset(64)) }
		k.iq1Groups(func(p int) VecVirtual {
			return k.iq1Indices(Mem{Base: wp, Disp: 2 + 8*p}, Mem{Base: wp, Disp: 34 + 4*p}, "iq1sshift",
				[8]uint32{0, 3, 6, 9, 16, 19, 22, 25})
		}, func(ib int, g VecVirtual) {
			l := YMM()
			VPBROADCASTD(k.spill.Offset(4*ib), l)
			k.iq1Dot(ib, g, l)
		})
		d := XMM()
		VPBROADCASTW(Mem{Base: wp}, d)
		VCVTPH2PS(d, d)
		return d
	})
}

// genIQ1M emits dotIQ1_M<suffix> and dotIQ1_Mx4<suffix>. The block: qs[32]
// | qh[16]: per group of 8 weights a nibble, the grid's high bits and the
// delta's sign (bit 3) | scales[8]: four uint16 of four 3-bit ls' each
// (one per 16 weights, ls = 2*ls'+1), the fp16 d in their top nibbles.
// The sixteen scales stay in two registers as ls|ls<<16 dwords: a
// 32-weight group's (its two ls in the two 128-bit lanes) are one VPERMD
// of them; the bsum correction is one VPMADDWD with 9*ls h in word h.
func genIQ1M(t *target, rows int) {
	iq1Loop(t, "IQ1_M", rows, iq1MSize, gridData("iq1sGrid", 8, 2048, func(b byte) byte { return 8 * (b + 1) }), func(k *iq1k, wp Register) VecVirtual {
		sc := YMM()
		VPBROADCASTQ(Mem{Base: wp, Disp: 48}, sc)
		var raw, lsw [2]VecVirtual
		for half := 0; half < 2; half++ {
			// Lane h of half: word 2*half + h/4 of the scales, shifted
			// by 3*(h%4). (VPSHUFB stays within 128-bit lanes: lanes 4-7
			// read the high lane's copy of the qword, at the same
			// offsets.)
			var ctl, sh []byte
			for h := 0; h < 8; h++ {
				wd := byte(2 * (2*half + h/4))
				ctl = append(ctl, wd, wd+1, 0x80, 0x80)
				sh = append(sh, byte(3*(h%4)), 0, 0, 0)
			}
			ls := YMM()
			VPSHUFB(constData([]string{"iq1mls0", "iq1mls1"}[half], ctl), sc, ls)
			VPSRLVD(constData("iq1mlsshift", sh), ls, ls)
			t.and(constVec(7), ls, ls)
			VPADDD(ls, ls, ls)
			t.or(constVec(1), ls, ls)
			raw[half] = ls
			w := YMM()
			VPSLLD(U8(16), ls, w)
			t.or(ls, w, w)
			lsw[half] = w
		}
		// The correction's words: ls h (the scale of bsum h's run) in
		// word h: the two halves' dwords packed (VPACKUSDW interleaves
		// the 128-bit lanes, VPERMQ puts them back in order).
		c, c8 := YMM(), YMM()
		VPACKUSDW(raw[1], raw[0], c)
		VPERMQ(U8(0xd8), c, c)
		VPSLLW(U8(3), c, c8)
		VPADDW(c8, c, c) // 9*ls: the bias of the weight bytes
		t.movStore(c, k.spill.Offset(64))
		var sp, bt []byte
		for j := 0; j < 32; j++ {
			sp = append(sp, byte(j/16))
			bt = append(bt, []byte{0x08, 0x80}[(j/8)%2])
		}
		// AVX2's sixteen registers are short for four rows: its
		// constants stay in memory there.
		var spread, bits, twos Op = constData("iq1mspread", sp), constData("iq1mbits", bt), constVec(0x02020202)
		if t.evex() || rows == 1 {
			r := [3]VecVirtual{YMM(), YMM(), YMM()}
			t.mov(spread.(Mem), r[0])
			t.mov(bits.(Mem), r[1])
			VPBROADCASTD(constU32(0x02020202), r[2])
			spread, bits, twos = r[0], r[1], r[2]
		}
		k.iq1Groups(func(p int) VecVirtual {
			return k.iq1Indices(Mem{Base: wp, Disp: 8 * p}, Mem{Base: wp, Disp: 32 + 4*p}, "iq1mshift",
				[8]uint32{0, 4, 8, 12, 16, 20, 24, 28})
		}, func(ib int, g VecVirtual) {
			v, u := YMM(), YMM()
			VPBROADCASTW(Mem{Base: wp, Disp: 32 + 2*ib}, v)
			VPSHUFB(spread, v, v)
			if t.evex() {
				m := K()
				VPTESTNMB(bits, v, m)  // the delta is positive
				VMOVDQU8_Z(twos, m, u) // 2 there, else 0
			} else {
				VPAND(bits, v, v)
				VPCMPEQB(bits, v, v) // all ones where the delta is negative
				VPANDN(twos, v, u)
			}
			t.or(g, u, u) // 8*(grid+1) + (delta+1)
			// Scale words 2ib and 2ib+1 over the two 128-bit lanes: one
			// VPERMD of the registers (a load spanning two stores of them
			// would wait for both to retire).
			l := YMM()
			var idx []byte
			for j := 0; j < 8; j++ {
				idx = append(idx, byte((2*ib+j/4)%8), 0, 0, 0)
			}
			t.mov(constData(fmt.Sprintf("iq1mpick%d", ib%4), idx), l)
			VPERMD(lsw[ib/4], l, l)
			k.iq1Dot(ib, u, l)
		})
		k.corr = func(j int) VecVirtual { return k.bsumTerm(j, k.spill.Offset(64)) }
		// d from the top nibbles of the four scale words.
		r, a, b := GP64(), GP64(), GP64()
		MOVQ(Mem{Base: wp, Disp: 48}, r)
		MOVQ(r, a)
		SHRQ(U8(12), a)
		ANDL(U32(0xf), a.As32())
		for _, s := range []struct {
			sh   uint8
			mask uint32
		}{{24, 0xf0}, {36, 0xf00}, {48, 0xf000}} {
			MOVQ(r, b)
			SHRQ(U8(s.sh), b)
			ANDL(U32(s.mask), b.As32())
			ORL(b.As32(), a.As32())
		}
		d := XMM()
		VMOVD(a.As32(), d)
		VCVTPH2PS(d, d)
		return d
	})
}
