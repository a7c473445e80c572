package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ2_XXS, IQ2_XS and IQ2_S · Q8_K, bit for bit
// ggml_vec_dot_iq2_{xxs,xs,s}_q8_K_generic (core/quant vecDotIQ2*). The
// reference sums each super-block's products as one integer bsum (each
// group of 8 weights is a grid entry of magnitudes 8..43 times 8 signs,
// each 16 or 32 weights times 2*ls+1) and adds sumf += d*float(bsum) in
// block order, d = fp16(d)*d8, returning 0.125*sumf; the kernels make the
// integer exactly in SIMD (gridk.go, as the IQ3 kernels: the signs on the
// grid bytes, |q8| the unsigned side of VPMADDUBSW, pair sums under
// 2*43*128) and keep that float chain. A 32-weight group's grid entries
// are four qwords of core/quant's grid (iq13grid.go), one load each.
//
// IQ2_XXS and IQ2_XS store 7-bit sign indices into ksigns_iq2xs, whose
// entry is the index with an even-parity bit 7: a super-block's 32 sign
// bytes are made in one ymm (parity7) and spilled, a group's four read
// back as its sign dword. IQ2_S stores the sign bytes themselves.
// IQ2_XS and IQ2_S scale each 16 weights: a group's two scales are one
// VPSHUFD of registers holding the super-block's (iq2HalfScales).

const (
	iq2XXSSize = 66
	iq2XSSize  = 74
	iq2SSize   = 82
)

// iq2HalfScales returns IQ2_XS/IQ2_S's sixteen scales ls = 2*nibble+1 of
// the eight scale bytes at m as two registers of ls|ls<<16 dwords for
// scaleOf: group ib's low-nibble scale (its first 16 weights) in dword
// ib%4 of the low 128-bit lane of register ib/4, its high-nibble one in
// the same dword of the high lane.
func iq2HalfScales(t *target, m Mem) [2]VecVirtual {
	b := YMM()
	VPBROADCASTQ(m, b)
	var r [2]VecVirtual
	for half := 0; half < 2; half++ {
		var ctl []byte
		for i := 0; i < 8; i++ {
			ctl = append(ctl, byte(4*half+i%4), 0x80, 0x80, 0x80)
		}
		ls, w := YMM(), YMM()
		VPSHUFB(constData(fmt.Sprintf("iq2sc%d", half), ctl), b, ls)
		VPSRLVD(constData("iq2scshift", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0}), ls, ls)
		t.and(constVec(0xf), ls, ls)
		VPADDD(ls, ls, ls)
		t.or(constVec(1), ls, ls)
		VPSLLD(U8(16), ls, w)
		t.or(ls, w, w)
		r[half] = w
	}
	return r
}

// genIQ2XXS emits dotIQ2_XXS<suffix>. The block: d | per group eight
// bytes: four grid indices, then the aux dword (xxsAux) of four 7-bit
// sign indices and ls'.
func genIQ2XXS(t *target, rows int) {
	gridLoop(t, "IQ2_XXS", rows, iq2XXSSize, 0.125, gridData("iq2xxsGrid", 8, 256), func(k *gridk, wp Register) {
		// The aux dwords are the odd ones: VSHUFPS takes them from two
		// loads as groups 0, 1, 4, 5 | 2, 3, 6, 7.
		y0, y1, x := YMM(), YMM(), YMM()
		t.mov(Mem{Base: wp, Disp: 2}, y0)
		t.mov(Mem{Base: wp, Disp: 34}, y1)
		VSHUFPS(U8(0xdd), y1, y0, x)
		k.xxsAux(x, [8]int{0, 1, 4, 5, 2, 3, 6, 7}, [2]uint8{0, 2}, [2]uint8{1, 3})
		for ib := 0; ib < 8; ib++ {
			g := k.gl.qwords(byteIdx(Mem{Base: wp, Disp: 2 + 8*ib}))
			k.group(ib, g, k.spill.Offset(4*k.signPos[ib]), scaleOf(k.sc, ib))
		}
	})
}

// genIQ2XS emits dotIQ2_XS<suffix>. The block: d | a uint16 per group of
// 8 weights: the 9-bit grid index and, above it, the 7-bit sign index |
// scales[8], two nibbles a 32-weight group.
func genIQ2XS(t *target, rows int) {
	gridLoop(t, "IQ2_XS", rows, iq2XSSize, 0.125, gridData("iq2xsGrid", 8, 512), func(k *gridk, wp Register) {
		// The sign indices as bytes: VPACKUSWB interleaves the 128-bit
		// lanes of its two sources, VPERMQ orders them.
		y0, y1 := YMM(), YMM()
		t.mov(Mem{Base: wp, Disp: 2}, y0)
		t.mov(Mem{Base: wp, Disp: 34}, y1)
		VPSRLW(U8(9), y0, y0)
		VPSRLW(U8(9), y1, y1)
		VPACKUSWB(y1, y0, y0)
		VPERMQ(U8(0xd8), y0, y0)
		parity7(t, y0)
		t.movStore(y0, k.spill)
		sc := iq2HalfScales(t, Mem{Base: wp, Disp: 66})
		for ib := 0; ib < 8; ib++ {
			g := k.gl.qwords(func(l int) Register {
				r := GP64()
				MOVWLZX(Mem{Base: wp, Disp: 2 + 8*ib + 2*l}, r.As32())
				ANDL(U32(511), r.As32())
				return r
			})
			k.group(ib, g, k.spill.Offset(4*ib), scaleOf(sc, ib))
		}
	})
}

// genIQ2S emits dotIQ2_S<suffix>. The block: d | qs[32], the low 8 bits
// of the grid indices | signs[32], one bit a weight | qh[8], a group's
// four 2-bit high parts | scales[8], two nibbles a group.
func genIQ2S(t *target, rows int) {
	gridLoop(t, "IQ2_S", rows, iq2SSize, 0.125, gridData("iq2sGrid", 8, 1024), func(k *gridk, wp Register) {
		sc := iq2HalfScales(t, Mem{Base: wp, Disp: 74})
		wi := newWordIdx(t, 2, rows == 1)
		for ib := 0; ib < 8; ib++ {
			g := k.gl.qwords(idxOf(wi.words(Mem{Base: wp, Disp: 2 + 4*ib}, Mem{Base: wp, Disp: 66 + ib})))
			k.group(ib, g, Mem{Base: wp, Disp: 34 + 4*ib}, scaleOf(sc, ib))
		}
	})
}

// genIQ2All emits the one-row and four-row kernels of the three types.
func genIQ2All(t *target) {
	genRows(t, genIQ2XXS, genIQ2XS, genIQ2S)
}
