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
// entry) is read a qword an entry (gridload.go), from a copy made at
// generate time with 1 added to every byte: g+1 in 0..2 is VPMADDUBSW's unsigned
// side against the activations as they are (-128 included), and
//
//	sum ls*g*q = sum ls*(g+1)*q - sum ls*bsum
//
// over each scale's run of 16 or 32 activations, the correction from the
// Q8_K block's bsums (exact sums of its quants in every Q8_K the quantizer
// makes; the TQ kernels rely on them too). IQ1_M folds its delta sums in:
// T = 8*sumi1 + sumi2 = sum ls*(8*grid + delta)*q is one product per
// weight byte, 8*(g+1) + (delta+1) in 0..18 (iq1mGrid holds it, indexed
// by the delta's sign too), minus 9*sum ls*bsum; |T| < 9*15*128*256 < 2^24, so
// float32(T)*0.125 is exact and equals the reference's float32(sumi1) +
// 0.125*float32(sumi2), which rounds the same exact value once.
// VPMADDWD (VPDPWSSD) by the scale words scales and sums the int16 pairs.

const (
	iq1SSize = 50
	iq1MSize = 56
)

// iq1k holds an IQ1 kernel's invariants and accumulators.
type iq1k struct {
	t  *target
	gl *gridLoad
	// spill: the bsum correction's words.
	spill Mem
	acts  []Mem // the activation rows' Q8_K blocks
	// acc[c][j]: row j's int32 lanes of sumi (IQ1_M: of T), chain c (one
	// row runs even and odd groups in two dependency chains).
	acc [][]VecVirtual
	// corr returns row j's int32 lanes of the bsum term to take from
	// the sum.
	corr func(j int) VecVirtual
}

// iq1Loop emits the kernel over rows (1 or 4) activation rows (actRows);
// body adds a super-block's integers into the accumulators (which start
// at zero) and returns its fp16 d as a float in the low lane of an xmm.
func iq1Loop(t *target, name string, rows, wsize int, grid Mem, body func(k *iq1k, wp Register) VecVirtual) {
	fn, wp, ap, nb, acts := actRows(t, name, rows)
	base := GP64()
	LEAQ(grid, base)
	k := &iq1k{t: t, gl: newGridLoad(t, base), acts: acts}
	k.spill = AllocLocal(32)
	sums := zeroSums(rows)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	k.acc = newChains(t, rows)
	d := body(k, wp)
	for j, a := range acts {
		s := foldChains(k.acc, j)
		c := k.corr(j)
		VPSUBD(c, s, s)
		f1 := hsumInt(t, s)
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

// dot adds group ib's unsigned weight bytes g times every row's 32
// activations into the accumulators, scaled by the words of l.
func (k *iq1k) dot(ib int, g, l VecVirtual) {
	for j, a := range k.acts {
		q := YMM()
		k.t.mov(a.Offset(4+32*ib), q)
		VPMADDUBSW(q, g, q)
		k.t.dotw(q, l, k.acc[ib%len(k.acc)][j])
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
		t.movStore(c, k.spill)
		lsWords(t, ls)
		sc := groupScales(ls)
		k.corr = func(j int) VecVirtual { return k.bsumTerm(j, k.spill) }
		wi := newWordIdx(t, 3, rows == 1)
		for ib := 0; ib < 8; ib++ {
			g := k.gl.qwords(idxOf(wi.words(Mem{Base: wp, Disp: 2 + 4*ib}, Mem{Base: wp, Disp: 34 + 2*ib})))
			k.dot(ib, g, scaleOf(sc, ib))
		}
		d := XMM()
		VPBROADCASTW(Mem{Base: wp}, d)
		VCVTPH2PS(d, d)
		return d
	})
}

// iq1mGrid is IQ1_M's grid as its kernels read it: 4096 entries, index
// bit 11 the delta's sign (a group's qh nibble is bits 8-11 of it), each
// byte 8*(g+1) + (delta+1): 8*(g+1)+2 below 2048, 8*(g+1) above.
func iq1mGrid() Mem {
	g := coreGrid("iq1sGrid")
	if len(g) != 2048 {
		panic(fmt.Sprintf("asmgen: iq1sGrid has %d entries, want 2048", len(g)))
	}
	var b []byte
	for _, add := range []byte{2, 0} {
		for _, v := range g {
			for i := 0; i < 8; i++ {
				b = append(b, 8*(byte(v>>(8*i))+1)+add)
			}
		}
	}
	return constData("grid_iq1m_delta", b)
}

// genIQ1M emits dotIQ1_M<suffix> and dotIQ1_Mx4<suffix>. The block: qs[32]
// | qh[16]: per group of 8 weights a nibble, the grid's high bits and the
// delta's sign (bit 3) | scales[8]: four uint16 of four 3-bit ls' each
// (one per 16 weights, ls = 2*ls'+1), the fp16 d in their top nibbles.
// A group's nibble over its qs byte is its index into iq1mGrid, whose
// bytes are 8*(grid+1) + (delta+1). The sixteen scales stay in two
// registers as ls|ls<<16 dwords, the low 128-bit lane the even ones, the
// high lane the odd: a 32-weight group's (its two ls over the two lanes)
// are one VPSHUFD of them; the bsum correction is one VPMADDWD with 9*ls
// h in word h.
func genIQ1M(t *target, rows int) {
	iq1Loop(t, "IQ1_M", rows, iq1MSize, iq1mGrid(), func(k *iq1k, wp Register) VecVirtual {
		sc := YMM()
		VPBROADCASTQ(Mem{Base: wp, Disp: 48}, sc)
		var raw, lsw [2]VecVirtual
		for half := 0; half < 2; half++ {
			// Dword i of half: ls h = 8*half + 2*(i%4) + i/4, word h/4 of
			// the scales shifted by 3*(h%4) (VPSHUFB stays within 128-bit
			// lanes: each holds the qword).
			var ctl, sh []byte
			for i := 0; i < 8; i++ {
				h := 8*half + 2*(i%4) + i/4
				wd := byte(2 * (h / 4))
				ctl = append(ctl, wd, wd+1, 0x80, 0x80)
				sh = append(sh, byte(3*(h%4)), 0, 0, 0)
			}
			ls := YMM()
			VPSHUFB(constData(fmt.Sprintf("iq1mls%d", half), ctl), sc, ls)
			VPSRLVD(constData(fmt.Sprintf("iq1mlsshift%d", half), sh), ls, ls)
			t.and(constVec(7), ls, ls)
			VPADDD(ls, ls, ls)
			t.or(constVec(1), ls, ls)
			raw[half] = ls
			w := YMM()
			VPSLLD(U8(16), ls, w)
			t.or(ls, w, w)
			lsw[half] = w
		}
		// The correction's words: 9*ls h in word h. VPACKUSDW makes
		// the even ls in the low lane, the odd in the high; VPERMQ and
		// VPSHUFB interleave them.
		c, c8 := YMM(), YMM()
		VPACKUSDW(raw[1], raw[0], c)
		VPERMQ(U8(0xd8), c, c)
		var il []byte
		for l := 0; l < 2; l++ {
			for i := 0; i < 8; i++ {
				w := byte(2 * (i/2 + 4*(i%2)))
				il = append(il, w, w+1)
			}
		}
		VPSHUFB(constData("iq1mcorr", il), c, c)
		VPSLLW(U8(3), c, c8)
		VPADDW(c8, c, c) // 9*ls: the bias of the weight bytes
		t.movStore(c, k.spill)
		k.corr = func(j int) VecVirtual { return k.bsumTerm(j, k.spill) }
		// The indices qs[j] | nibble j<<8 as words: the nibbles in byte
		// order (word i of VPMOVZXBW(qh) is qh[i]: its low nibble stays,
		// its high one goes to the high byte), interleaved with the qs
		// bytes. The unpacks work within lanes: words 0-7 | 16-23, then
		// 8-15 | 24-31.
		// A group's nibbles over its qs bytes are its indices.
		wi := newWordIdx(t, 4, rows == 1)
		for ib := 0; ib < 8; ib++ {
			l := scaleOf(lsw, ib)
			g := k.gl.qwords(idxOf(wi.words(Mem{Base: wp, Disp: 4 * ib}, Mem{Base: wp, Disp: 32 + 2*ib})))
			k.dot(ib, g, l)
		}
		// d from the top nibbles of the four scale words.
		if t.bmi2 {
			r, m := GP64(), constGP(0xf000f000f000f000)
			MOVQ(Mem{Base: wp, Disp: 48}, r)
			PEXTQ(m, r, r)
			d := XMM()
			VMOVD(r.As32(), d)
			VCVTPH2PS(d, d)
			return d
		}
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
