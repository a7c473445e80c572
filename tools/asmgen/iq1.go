package main

import (
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
// entry) is gathered four qwords at a time with 11-bit indices built for
// two 32-weight groups per vector; the activations' signs go onto the
// grid bytes and |q8| (128 fits) is VPMADDUBSW's unsigned side, so every
// activation byte is exact; VPMADDWD by the scale words scales and sums.

const (
	iq1SSize = 50
	iq1MSize = 56
)

// iq1k holds an IQ1 kernel's invariants and accumulators.
type iq1k struct {
	t          *target
	grid       Register
	ones       VecVirtual // 1 in every byte
	spill      Mem
	acc1, acc2 VecVirtual // int32 lanes of sumi and of sumi1 (sumi2)
}

// gather returns the four grid qwords at the dword indices in idx (an
// xmm); see iq3k.gather on the register constraints.
func (k *iq1k) gather(idx func() VecVirtual) VecVirtual {
	g, m := YMM(), YMM()
	VPXOR(g, g, g)
	VPCMPEQD(m, m, m)
	VPGATHERDQ(m, Mem{Base: k.grid, Index: idx(), Scale: 8}, g)
	return g
}

// iq1Loop emits dot<name><suffix>(w, a *byte, nb int) float32; body adds a
// super-block's integers into k.acc1 and k.acc2 (which start at zero) and
// returns its fp16 d as a float in the low lane of an xmm.
func iq1Loop(t *target, name string, wsize int, body func(k *iq1k, wp, ap Register) VecVirtual) {
	fn := "dot" + name + t.suffix
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k := &iq1k{t: t, grid: GP64(), ones: YMM()}
	LEAQ(gridData("iq1sGrid", 8, 2048), k.grid)
	VPBROADCASTD(constU32(0x01010101), k.ones)
	k.spill = AllocLocal(96)
	sum := XMM()
	VXORPS(sum, sum, sum)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	k.acc1, k.acc2 = YMM(), YMM()
	VPXOR(k.acc1, k.acc1, k.acc1)
	VPXOR(k.acc2, k.acc2, k.acc2)
	d := body(k, wp, ap)
	f1 := hsumInt(t, k.acc1)
	f2 := hsumInt(t, k.acc2)
	VMULSS(constU32(0x3e000000), f2, f2) // IQ1*_DELTA (0.125) * float32(sumi1)
	VADDSS(f2, f1, f1)
	VMULSS(Mem{Base: ap}, d, d) // d*d8
	VMULSS(d, f1, f1)
	VADDSS(f1, sum, sum)
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	Store(sum, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// iq1Dot adds the 32 products of group ib (grid bytes g, its activations
// at a) into acc1 scaled by the words of l, and with pm (±1 a byte, the
// delta's sign; nil for none) the signed activation sum into acc2.
func (k *iq1k) iq1Dot(g VecVirtual, a Mem, l VecVirtual, pm VecVirtual) {
	q, aq := YMM(), YMM()
	VMOVDQU(a, q)
	VPABSB(q, aq)
	VPSIGNB(q, g, g)
	VPMADDUBSW(g, aq, g)
	k.t.dotw(g, l, k.acc1)
	if pm != nil {
		VPSIGNB(q, pm, pm)
		VPMADDUBSW(pm, aq, pm)
		k.t.dotw(pm, l, k.acc2)
	}
}

// iq1Indices returns the eight 11-bit grid indices of groups 8p..8p+7 of
// 8 weights: the qs bytes at qs, the high three bits of group j at bit
// shift[j] of the dword at hi.
func iq1Indices(qs, hi Mem, name string, shift [8]uint32) VecVirtual {
	idx, h := YMM(), YMM()
	VPMOVZXBD(qs, idx)
	VPBROADCASTD(hi, h)
	var b []byte
	for _, s := range shift {
		b = append(b, byte(s), 0, 0, 0)
	}
	VPSRLVD(constData(name, b), h, h)
	VPAND(constVec(7), h, h)
	VPSLLD(U8(8), h, h)
	VPOR(h, idx, idx)
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
			VEXTRACTI128(U8(1), ix, h)
			return h
		}))
	}
}

// genIQ1S emits dotIQ1_SAVX2 etc. The block: d | qs[32] | qh[8] uint16,
// one per 32 weights: the grid's high bits (3 a group, bits 0-11), ls' in
// bits 12-14 (ls = 2*ls'+1) and the delta's sign in bit 15. sumi1 is
// sum ls*delta*(bsums[2ib]+bsums[2ib+1]) of the Q8_K block's bsums, as
// the reference has it: one VPMADDWD of the sixteen bsums.
func genIQ1S(t *target) {
	iq1Loop(t, "IQ1_S", iq1SSize, func(k *iq1k, wp, ap Register) VecVirtual {
		qh := YMM()
		VPMOVZXWD(Mem{Base: wp, Disp: 34}, qh)
		ls := YMM()
		VPSRLD(U8(12), qh, ls)
		VPAND(constVec(7), ls, ls)
		VPADDD(ls, ls, ls)
		VPOR(constVec(1), ls, ls)
		m, sd := YMM(), YMM()
		VPSLLD(U8(16), qh, m)
		VPSRAD(U8(31), m, m)
		VPXOR(m, ls, sd)
		VPSUBD(m, sd, sd) // ls*delta
		w := YMM()
		VPSLLD(U8(16), sd, w)
		VPAND(constVec(0xffff), sd, sd)
		VPOR(sd, w, w)
		VPMADDWD(Mem{Base: ap, Disp: 260}, w, k.acc2)
		VPSLLD(U8(16), ls, w)
		VPOR(w, ls, ls)
		VMOVDQU(ls, k.spill)
		k.iq1Groups(func(p int) VecVirtual {
			return iq1Indices(Mem{Base: wp, Disp: 2 + 8*p}, Mem{Base: wp, Disp: 34 + 4*p}, "iq1sshift",
				[8]uint32{0, 3, 6, 9, 16, 19, 22, 25})
		}, func(ib int, g VecVirtual) {
			l := YMM()
			VPBROADCASTD(k.spill.Offset(4*ib), l)
			k.iq1Dot(g, Mem{Base: ap, Disp: 4 + 32*ib}, l, nil)
		})
		d := XMM()
		VPBROADCASTW(Mem{Base: wp}, d)
		VCVTPH2PS(d, d)
		return d
	})
}

// genIQ1M emits dotIQ1_MAVX2 etc. The block: qs[32] | qh[16]: per group
// of 8 weights a nibble, the grid's high bits and the delta's sign (bit
// 3) | scales[8]: four uint16 of four 3-bit ls' each (one per 16 weights,
// ls = 2*ls'+1), the fp16 d in their top nibbles. Each 32-weight group's
// scale words (its two ls in the two 128-bit lanes) are one VPERMD of the
// sixteen kept on the stack.
func genIQ1M(t *target) {
	iq1Loop(t, "IQ1_M", iq1MSize, func(k *iq1k, wp, ap Register) VecVirtual {
		sc := YMM()
		VPBROADCASTQ(Mem{Base: wp, Disp: 48}, sc)
		for half := 0; half < 2; half++ {
			// Lane h of half: word 2*half + h/4 of the scales, shifted
			// by 3*(h%4).
			var ctl []byte
			for h := 0; h < 8; h++ {
				wd := byte(2 * (2*half + h/4))
				ctl = append(ctl, wd, wd+1, 0x80, 0x80)
			}
			// (VPSHUFB stays within 128-bit lanes: lanes 4-7 read the
			// high lane's copy of the qword, at the same offsets.)
			ls := YMM()
			VPSHUFB(constData([]string{"iq1mls0", "iq1mls1"}[half], ctl), sc, ls)
			var sh []byte
			for h := 0; h < 8; h++ {
				sh = append(sh, byte(3*(h%4)), 0, 0, 0)
			}
			VPSRLVD(constData("iq1mlsshift", sh), ls, ls)
			VPAND(constVec(7), ls, ls)
			VPADDD(ls, ls, ls)
			VPOR(constVec(1), ls, ls)
			w := YMM()
			VPSLLD(U8(16), ls, w)
			VPOR(w, ls, ls)
			VMOVDQU(ls, k.spill.Offset(32*half))
		}
		var sp, bt, pr []byte
		for j := 0; j < 32; j++ {
			sp = append(sp, byte(j/16))
			bt = append(bt, []byte{0x08, 0x80}[(j/8)%2])
		}
		for j := 0; j < 8; j++ {
			pr = append(pr, byte(j/4), 0, 0, 0)
		}
		spread, bits, pick := YMM(), YMM(), YMM()
		VMOVDQU(constData("iq1mspread", sp), spread)
		VMOVDQU(constData("iq1mbits", bt), bits)
		VMOVDQU(constData("iq1mpick", pr), pick)
		k.iq1Groups(func(p int) VecVirtual {
			return iq1Indices(Mem{Base: wp, Disp: 8 * p}, Mem{Base: wp, Disp: 32 + 4*p}, "iq1mshift",
				[8]uint32{0, 4, 8, 12, 16, 20, 24, 28})
		}, func(ib int, g VecVirtual) {
			pm := YMM()
			VPBROADCASTW(Mem{Base: wp, Disp: 32 + 2*ib}, pm)
			VPSHUFB(spread, pm, pm)
			VPAND(bits, pm, pm)
			VPCMPEQB(bits, pm, pm)
			VPOR(k.ones, pm, pm) // -1 where the delta is negative, else +1
			l := YMM()
			VPERMD(k.spill.Offset(8*ib), pick, l)
			k.iq1Dot(g, Mem{Base: ap, Disp: 4 + 32*ib}, l, pm)
		})
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
