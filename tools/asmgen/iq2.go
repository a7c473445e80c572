package main

import (
	"math/bits"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ2_XXS, IQ2_XS and IQ2_S · Q8_K, bit for bit
// ggml_vec_dot_iq2_{xxs,xs,s}_q8_K_generic (core/quant vecDotIQ2*). The
// reference sums each super-block's products as one integer bsum (each
// group of 8 weights is a grid entry of magnitudes 8..43 times 8 signs,
// each 16 or 32 weights times 2*ls+1) and adds sumf += d*float(bsum) in
// block order, d = fp16(d)*d8, returning 0.125*sumf; the kernels do the
// integer part in SIMD and that float chain as it is.
//
// A 32-weight sub-block is one ymm: its four grid entries are four qword
// loads from the grid table, which the caller passes (core/quant's, via
// kernelkit), indexed by the weights' 8-10 bit indices. The signs become
// a byte mask m (0xff where a weight is negative), and
//
//	sum g*s*q8 = maddubs(g, q8) - 2*maddubs(g&m, q8)
//
// holds for every activation byte, -128 included (g <= 43 is the unsigned
// side, pair sums stay within int16, and the difference, which fits, is
// exact in wrapping int16 arithmetic). The int16 pair sums times the
// scale words (VPMADDWD, or VPDPWSSD with VNNI) add into int32 lanes: a
// super-block's lanes hold at most 256*43*128*31 < 2^31.
//
// IQ2_XXS and IQ2_XS store 7-bit sign indices into ksigns_iq2xs, whose
// entry is the index with an even-parity bit 7; a super-block's 32 sign
// bytes are made in one ymm (the parity from two nibble lookups), and a
// sub-block's four are one VPSHUFD broadcast from it (half). IQ2_S stores
// the sign bytes themselves. The x4 kernels run four Q8_K rows over each
// decoded sub-block. All three run the same 256-bit code on every level;
// the AVX-512 levels only use EVEX forms where avo may allocate registers
// 16-31 (mov, maskedGrid).

type iq2type struct {
	name string
	size int
}

var (
	iq2XXS = &iq2type{"IQ2_XXS", 66}
	iq2XS  = &iq2type{"IQ2_XS", 74}
	iq2S   = &iq2type{"IQ2_S", 82}
)

// iq2SignPos is the dword of the stacked sign (and IQ2_XXS scale) vectors
// that holds sub-block ib: the prep's VSHUFPS/VPACKUSWB interleave lanes.
var iq2SignPos = [8]int{0, 1, 4, 5, 2, 3, 6, 7}

// iq2Parity is the VPSHUFB table of 0x80*parity(i), both lanes.
func iq2Parity() Mem {
	var b []byte
	for h := 0; h < 2; h++ {
		for i := 0; i < 16; i++ {
			b = append(b, byte(0x80*(bits.OnesCount8(uint8(i))&1)))
		}
	}
	return constData("iq2par", b)
}

// iq2Spread spreads a broadcast dword's four sign bytes: byte l over
// weights 8l..8l+7 (low lane l = 0, 1; high lane 2, 3).
func iq2Spread() Mem {
	var b []byte
	for e := 0; e < 32; e++ {
		b = append(b, byte(e/8))
	}
	return constData("iq2spread", b)
}

// iq2Bits is 1 << (e%8) in byte e.
func iq2Bits() Mem {
	var b []byte
	for e := 0; e < 32; e++ {
		b = append(b, byte(1)<<(e%8))
	}
	return constData("iq2bits", b)
}

// iq2LaneScale puts word 0 of a broadcast dword in every word of the low
// lane, word 1 in every word of the high lane.
func iq2LaneScale() Mem {
	var b []byte
	for e := 0; e < 16; e++ {
		b = append(b, byte(2*(e/8)), byte(2*(e/8)+1))
	}
	return constData("iq2lanesc", b)
}

// iq2k holds one kernel's registers.
type iq2k struct {
	t    *target
	ty   *iq2type
	wp   Register
	grid Register
	idx  [4]Register
	tmp  Register
	// signV (IQ2_XXS/XS) and scaleV hold a super-block's sign dwords and
	// scale dwords, sub-block ib's in dword iq2SignPos[ib]; signH and
	// scaleH one 128-bit half of them in both halves, for VPSHUFD to
	// broadcast from (no store and reload through the stack).
	signV, scaleV VecVirtual
	signH, scaleH VecVirtual
	// scaleHalf: IQ2_XS/S's scaleH for both halves, made by scales.
	scaleHalf [2]VecVirtual
	bitsV     VecVirtual
	sprd      VecVirtual
}

// mov is VMOVDQU, EVEX-encoded where registers 16-31 may be allocated.
func (k *iq2k) mov(src, dst Op) {
	if k.t.evex() {
		VMOVDQU64(src, dst)
	} else {
		VMOVDQU(src, dst)
	}
}

func (k *iq2k) insert128(x, y VecVirtual) {
	if k.t.evex() {
		VINSERTI32X4(U8(1), x, y, y)
	} else {
		VINSERTI128(U8(1), x, y, y)
	}
}

func (k *iq2k) extract128(y VecVirtual) VecVirtual {
	x := XMM()
	if k.t.evex() {
		VEXTRACTI32X4(U8(1), y, x)
	} else {
		VEXTRACTI128(U8(1), y, x)
	}
	return x
}

// parity ORs the even-parity bit 7 into 7-bit bytes s.
func (k *iq2k) parity(s VecVirtual) {
	t := k.t
	lo, hi, tab := YMM(), YMM(), YMM()
	c0f := constVec(0x0f0f0f0f)
	t.and(c0f, s, lo)
	VPSRLW(U8(4), s, hi)
	t.and(c0f, hi, hi)
	k.mov(iq2Parity(), tab)
	VPSHUFB(lo, tab, lo)
	VPSHUFB(hi, tab, hi)
	if t.evex() {
		VPXORD(hi, lo, lo)
	} else {
		VPXOR(hi, lo, lo)
	}
	t.or(lo, s, s)
}

// prep decodes what the sub-blocks of the super-block at wp share onto the
// stack.
func (k *iq2k) prep() {
	t := k.t
	w := func(d int) Mem { return Mem{Base: k.wp, Disp: d} }
	switch k.ty {
	case iq2XXS:
		y0, y1, a := YMM(), YMM(), YMM()
		k.mov(w(2), y0)
		k.mov(w(34), y1)
		// The aux dwords (odd dwords): sub-blocks 0,1,4,5 | 2,3,6,7.
		VSHUFPS(U8(0xdd), y1, y0, a)
		// Scales 2*(aux>>28)+1, in both words of the dword.
		sc, s2 := YMM(), YMM()
		VPSRLD(U8(28), a, sc)
		VPADDD(sc, sc, sc)
		t.or(constVec(1), sc, sc)
		VPSLLD(U8(16), sc, s2)
		t.or(s2, sc, sc)
		k.scaleV = sc
		// Four 7-bit sign indices per dword to four bytes.
		x, u := YMM(), YMM()
		t.and(constVec(0x3fff), a, x)
		t.and(constVec(0x0fffc000), a, u)
		VPSLLD(U8(2), u, u)
		t.or(u, x, x)
		t.and(constVec(0x3f803f80), x, u)
		t.and(constVec(0x007f007f), x, x)
		VPSLLD(U8(1), u, u)
		t.or(u, x, x)
		k.parity(x)
		k.signV = x
	case iq2XS:
		y0, y1 := YMM(), YMM()
		k.mov(w(2), y0)
		k.mov(w(34), y1)
		VPSRLW(U8(9), y0, y0)
		VPSRLW(U8(9), y1, y1)
		VPACKUSWB(y1, y0, y0)
		k.parity(y0)
		k.signV = y0
		k.scales(w(66))
	case iq2S:
		k.scales(w(74))
	}
}

// scales makes IQ2_XS/IQ2_S's per sub-block dwords (2*lo+1) | (2*hi+1)<<16
// from the eight scale bytes at m, both halves in scaleHalf.
func (k *iq2k) scales(m Mem) {
	b, v, hi := YMM(), YMM(), YMM()
	VPBROADCASTQ(m, b)
	VPMOVZXBW(b.AsX(), v) // both lanes: the eight bytes' words
	VPSRLW(U8(4), v, hi)
	k.t.and(constVec(0x000f000f), v, v)
	VPADDW(v, v, v)
	VPADDW(hi, hi, hi)
	one := constVec(0x00010001)
	k.t.or(one, v, v)
	k.t.or(one, hi, hi)
	lo4 := YMM()
	VPUNPCKLWD(hi, v, lo4) // sub-blocks 0-3 in both lanes
	VPUNPCKHWD(hi, v, v)   // 4-7
	// iq2SignPos's halves: 0, 1, 4, 5 and 2, 3, 6, 7.
	h0, h1 := YMM(), YMM()
	VPUNPCKLQDQ(v, lo4, h0)
	VPUNPCKHQDQ(v, lo4, h1)
	k.scaleHalf = [2]VecVirtual{h0, h1}
}

// gridVec loads sub-block ib's four grid entries: four scalar loads, which
// beat one VPGATHERDQ on Zen 5 (4096² IQ2_XXS MatVec, 1 thread, best of
// ~150: 1.07 ms against 1.21 ms).
func (k *iq2k) gridVec(ib int) VecVirtual {
	for l := 0; l < 4; l++ {
		r := k.idx[l]
		switch k.ty {
		case iq2XXS:
			MOVBQZX(Mem{Base: k.wp, Disp: 2 + 8*ib + l}, r)
		case iq2XS:
			MOVWQZX(Mem{Base: k.wp, Disp: 2 + 8*ib + 2*l}, r)
			ANDQ(U32(511), r)
		case iq2S:
			// qs | (qh << (8-2l)) & 0x300, as ggml's AVX2 code makes it.
			h := k.tmp
			MOVBQZX(Mem{Base: k.wp, Disp: 2 + 4*ib + l}, r)
			MOVBQZX(Mem{Base: k.wp, Disp: 66 + ib}, h)
			SHLQ(U8(8-2*l), h)
			ANDQ(U32(0x300), h)
			ORQ(h, r)
		}
	}
	g := func(l int) Mem { return Mem{Base: k.grid, Index: k.idx[l], Scale: 8} }
	// Broadcasts define the whole register for avo's liveness (a VMOVQ
	// into y's low half would keep y live from the function's start).
	y, x := YMM(), XMM()
	VPBROADCASTQ(g(0), y)
	VPINSRQ(U8(1), g(1), y.AsX(), y.AsX())
	VPBROADCASTQ(g(2), x)
	VPINSRQ(U8(1), g(3), x, x)
	k.insert128(x, y)
	return y
}

// signMask returns sub-block ib's byte mask, 0xff for a negative weight.
func (k *iq2k) signMask(ib int) VecVirtual {
	src := Mem{Base: k.wp, Disp: 34 + 4*ib} // IQ2_S's sign bytes
	m := YMM()
	k.bcastSign(ib, src, m)
	VPSHUFB(k.sprd, m, m)
	k.t.and(k.bitsV, m, m)
	VPCMPEQB(k.bitsV, m, m)
	return m
}

// maskedGrid returns g where sub-block ib's weights are negative, 0
// elsewhere.
func (k *iq2k) maskedGrid(ib int, g VecVirtual) VecVirtual {
	if !k.t.evex() {
		m := k.signMask(ib)
		VPAND(g, m, m)
		return m
	}
	// VPCMPEQB has no EVEX form with a vector result: test into a mask.
	src := Mem{Base: k.wp, Disp: 34 + 4*ib} // IQ2_S's sign bytes
	m, km := YMM(), K()
	k.bcastSign(ib, src, m)
	VPSHUFB(k.sprd, m, m)
	VPTESTMB(k.bitsV, m, km)
	VMOVDQU8_Z(g, km, m)
	return m
}

// bcastSign puts sub-block ib's four sign bytes in every dword of m: from
// src (IQ2_S) or signH.
func (k *iq2k) bcastSign(ib int, src Mem, m VecVirtual) {
	if k.ty == iq2S {
		VPBROADCASTD(src, m)
		return
	}
	VPSHUFD(U8(0x55*(iq2SignPos[ib]%4)), k.signH, m)
}

// half makes signH and scaleH hold half h (0: sub-blocks 0, 1, 4, 5; 1:
// 2, 3, 6, 7).
func (k *iq2k) half(h int) {
	imm := U8(0x44)
	if h == 1 {
		imm = U8(0xee)
	}
	if k.ty == iq2XXS {
		k.scaleH = YMM()
		VPERMQ(imm, k.scaleV, k.scaleH)
	} else {
		k.scaleH = k.scaleHalf[h]
	}
	if k.ty != iq2S {
		k.signH = YMM()
		VPERMQ(imm, k.signV, k.signH)
	}
}

// scaleVec returns sub-block ib's scale words.
func (k *iq2k) scaleVec(ib int) VecVirtual {
	s := YMM()
	if k.ty == iq2XXS {
		VPSHUFD(U8(0x55*(iq2SignPos[ib]%4)), k.scaleH, s)
		return s
	}
	VPSHUFD(U8(0x55*(iq2SignPos[ib]%4)), k.scaleH, s)
	VPSHUFB(iq2LaneScale(), s, s)
	return s
}

// genIQ2 emits dot<T><suffix>(w, a *byte, nb int, grid *uint64) float32
// (rows 1) or dot<T>x4<suffix>(w, a *byte, nb, astride int, grid *uint64,
// out *float32) (rows 4: the Q8_K rows a, a+astride, ...).
func genIQ2(t *target, ty *iq2type, rows int) {
	name := "dot" + ty.name + t.suffix
	if rows == 4 {
		name = "dot" + ty.name + "x4" + t.suffix
		TEXT(name, NOSPLIT, "func(w, a *byte, nb, astride int, grid *uint64, out *float32)")
	} else {
		TEXT(name, NOSPLIT, "func(w, a *byte, nb int, grid *uint64) float32")
	}
	Pragma("noescape")
	k := &iq2k{t: t, ty: ty}
	k.wp = Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k.grid = Load(Param("grid"), GP64())
	var as, as3 Register
	if rows == 4 {
		as = Load(Param("astride"), GP64())
		as3 = GP64()
		LEAQ(Mem{Base: as, Index: as, Scale: 2}, as3)
	}
	for l := range k.idx {
		k.idx[l] = GP64()
	}
	k.tmp = GP64()
	arow := func(j, disp int) Mem {
		switch j {
		case 0:
			return Mem{Base: ap, Disp: disp}
		case 3:
			return Mem{Base: ap, Index: as3, Scale: 1, Disp: disp}
		}
		return Mem{Base: ap, Index: as, Scale: uint8(j), Disp: disp}
	}
	k.bitsV, k.sprd = YMM(), YMM()
	k.mov(iq2Bits(), k.bitsV)
	k.mov(iq2Spread(), k.sprd)
	sumf := XMM()
	t.zero(sumf)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	k.prep()
	// One row's even and odd sub-blocks add into two accumulators, two
	// dependency chains.
	nacc := 2
	if rows > 1 {
		nacc = 1
	}
	acc := make([][]VecVirtual, nacc)
	for c := range acc {
		acc[c] = make([]VecVirtual, rows)
		for j := range acc[c] {
			acc[c][j] = YMM()
			t.zero(acc[c][j])
		}
	}
	for i, ib := range []int{0, 1, 4, 5, 2, 3, 6, 7} {
		if i%4 == 0 {
			k.half(i / 4)
		}
		g := k.gridVec(ib)
		m := k.maskedGrid(ib, g)
		sv := k.scaleVec(ib)
		for j := 0; j < rows; j++ {
			// One row reads its activations once; four rows need the
			// registers (AVX2 has 16).
			var q Op = arow(j, 4+32*ib)
			if rows == 1 {
				r := YMM()
				k.mov(q, r)
				q = r
			}
			p1, p2 := YMM(), YMM()
			VPMADDUBSW(q, g, p1)
			VPMADDUBSW(q, m, p2)
			VPSUBW(p2, p1, p1)
			VPSUBW(p2, p1, p1)
			t.dotw(p1, sv, acc[ib%nacc][j])
		}
	}
	if nacc == 2 {
		VPADDD(acc[1][0], acc[0][0], acc[0][0])
	}
	// d = fp16(d) * d8, per activation row.
	dw := XMM()
	VPBROADCASTW(Mem{Base: k.wp}, dw)
	VCVTPH2PS(dw, dw)
	if rows == 1 {
		h := k.extract128(acc[0][0])
		VPADDD(h, acc[0][0].AsX(), h)
		s := XMM()
		VPSHUFD(U8(0x4e), h, s)
		VPADDD(s, h, h)
		VPSHUFD(U8(0xb1), h, s)
		VPADDD(s, h, h)
		VCVTDQ2PS(h, h)
		VMULSS(Mem{Base: ap}, dw, dw)
		VMULSS(h, dw, dw)
		VADDSS(dw, sumf, sumf)
	} else {
		// Lane j of h: row j's sum (integer adds, any order).
		pair := func(a, b VecVirtual) VecVirtual {
			lo, hi := YMM(), YMM()
			VPUNPCKLDQ(b, a, lo)
			VPUNPCKHDQ(b, a, hi)
			VPADDD(hi, lo, lo)
			return lo
		}
		a := acc[0]
		s01, s23 := pair(a[0], a[1]), pair(a[2], a[3])
		u0, u1 := YMM(), YMM()
		VPUNPCKLQDQ(s23, s01, u0)
		VPUNPCKHQDQ(s23, s01, u1)
		VPADDD(u1, u0, u0)
		h := k.extract128(u0)
		VPADDD(h, u0.AsX(), h)
		VCVTDQ2PS(h, h)
		da := XMM()
		VMOVSS(arow(0, 0), da)
		VINSERTPS(U8(0x10), arow(1, 0), da, da)
		VINSERTPS(U8(0x20), arow(2, 0), da, da)
		VINSERTPS(U8(0x30), arow(3, 0), da, da)
		VMULPS(da, dw, dw)
		VMULPS(h, dw, dw)
		VADDPS(dw, sumf, sumf)
	}
	ADDQ(U32(ty.size), k.wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	eighth := XMM()
	VBROADCASTSS(constU32(0x3e000000), eighth) // 0.125
	if rows == 1 {
		VMULSS(eighth, sumf, sumf)
		Store(sumf, ReturnIndex(0))
	} else {
		VMULPS(eighth, sumf, sumf)
		out := Load(Param("out"), GP64())
		VMOVUPS(sumf, Mem{Base: out})
	}
	VZEROUPPER()
	RET()
}

// genIQ2All emits the one-row and four-row kernels of the three types.
func genIQ2All(t *target) {
	for _, ty := range []*iq2type{iq2XXS, iq2XS, iq2S} {
		genIQ2(t, ty, 1)
		genIQ2(t, ty, 4)
	}
}
