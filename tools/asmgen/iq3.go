package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ3_XXS and IQ3_S · Q8_K, bit for bit ggml_vec_dot_iq3_xxs_q8_K_generic
// and ggml_vec_dot_iq3_s_q8_K_generic (core/quant vecDotIQ3XXS,
// vecDotIQ3S). The reference's float work is one chain per super-block,
// sumf += d*float(bsum) with d = fp16(d)*d8 (and IQ3_XXS's 0.25*sumf at
// the end); bsum = sum over the eight 32-weight groups of ls*sumi is an
// integer, which the kernels make exactly in any order:
//
//   - the 32 grid magnitudes of a group (0..62) are eight dwords of
//     core/quant's grid (iq13grid.go), one plain load each (gridload.go);
//   - the weights' signs go onto the grid bytes (EVEX: one VPSUBB from
//     zero under the group's 32 sign bits as a mask; AVX2: VPSIGNB by
//     a ±1 vector made from them), the activations' signs too (VPSIGNB),
//     and |q8| is the unsigned side of VPMADDUBSW: |-128| = 128 fits a
//     byte, so every activation is exact, and the pair sums stay under
//     2*62*128;
//   - VPMADDWD by the group's ls (in both words of a dword; VNNI:
//     VPDPWSSD with the dword broadcast from memory) sums the pairs into
//     int32 lanes, already scaled. One row runs even and odd groups in
//     two accumulator chains.
//
// All levels run these 256-bit kernels.

const (
	iq3XXSSize = 98
	iq3SSize   = 110
)

// hsumInt returns the int32 sum of v's eight lanes as a float in the low
// lane of an xmm.
func hsumInt(t *target, v VecVirtual) VecVirtual {
	x := XMM()
	VPADDD(t.highHalfY(v), v.AsX(), x)
	r := XMM()
	VPSHUFD(U8(0x4e), x, r)
	VPADDD(r, x, x)
	VPSHUFD(U8(0xb1), x, r)
	VPADDD(r, x, x)
	VCVTDQ2PS(x, x)
	return x
}

// actRows loads the activation parameters of a kernel over rows (1 or 4)
// Q8_K rows: dot<name><suffix>(w, a *byte, nb int) float32, or
// dot<name>x4<suffix>(w, a *byte, nb, astride int, out *float32) with
// row j at a + j*astride. It returns the function's name, the rows'
// block addresses and the register that steps them.
func actRows(t *target, name string, rows int) (fn string, wp, ap, nb Register, acts []Mem) {
	if rows == 1 {
		fn = "dot" + name + t.suffix
		TEXT(fn, NOSPLIT, "func(w, a *byte, nb int) float32")
	} else {
		fn = "dot" + name + "x4" + t.suffix
		TEXT(fn, NOSPLIT, "func(w, a *byte, nb, astride int, out *float32)")
	}
	Pragma("noescape")
	wp = Load(Param("w"), GP64())
	ap = Load(Param("a"), GP64())
	nb = Load(Param("nb"), GP64())
	acts = []Mem{{Base: ap}}
	if rows == 4 {
		as := Load(Param("astride"), GP64())
		as3 := GP64()
		LEAQ(Mem{Base: as, Index: as, Scale: 2}, as3)
		acts = append(acts, Mem{Base: ap, Index: as, Scale: 1}, Mem{Base: ap, Index: as, Scale: 2},
			Mem{Base: ap, Index: as3, Scale: 1})
	}
	return fn, wp, ap, nb, acts
}

// storeRows returns the rows' sums: the float32 result, or out[0:4].
func storeRows(sums []VecVirtual) {
	if len(sums) == 1 {
		Store(sums[0], ReturnIndex(0))
		return
	}
	out := Load(Param("out"), GP64())
	for j, s := range sums {
		VMOVSS(s, Mem{Base: out, Disp: 4 * j})
	}
}

// genIQ3XXS emits dotIQ3_XXS<suffix>. The block: d | qs[64] grid indices
// | eight dwords, one a group: four 7-bit sign indices (the eighth sign is
// their parity, ksigns_iq2xs) and ls' = bits 28-31, ls = 2*ls'+1.
func genIQ3XXS(t *target, rows int) {
	gridLoop(t, "IQ3_XXS", rows, iq3XXSSize, 0.25, gridData("iq3xxsGrid", 4, 256), func(k *gridk, wp Register) {
		x := YMM()
		t.mov(Mem{Base: wp, Disp: 66}, x)
		k.xxsAux(x, [8]int{0, 1, 2, 3, 4, 5, 6, 7}, [2]uint8{0, 1}, [2]uint8{2, 3})
		for g := 0; g < 8; g++ {
			grid := k.gl.dwords(byteIdx(Mem{Base: wp, Disp: 2 + 8*g}))
			k.group(g, grid, k.spill.Offset(4*k.signPos[g]), scaleOf(k.sc, g))
		}
	})
}

// genIQ13 emits the IQ3 and IQ1 kernels of one target.
func genIQ13(t *target) {
	genRows(t, genIQ3XXS, genIQ3S, genIQ1S, genIQ1M)
}

// genIQ3S emits dotIQ3_S<suffix>. The block: d | qs[64] low 8 bits of the
// grid indices | qh[8], one a group, bit m the ninth bit of index m |
// signs[32], one bit a weight | scales[4], a nibble ls' a group (ls =
// 2*ls'+1). With BMI2 PDEP makes the indices (wordIdx); the plain AVX2
// target, where the shifts would take five instructions an index, keeps
// VPGATHERDD.
func genIQ3S(t *target, rows int) {
	gridLoop(t, "IQ3_S", rows, iq3SSize, 1, gridData("iq3sGrid", 4, 512), func(k *gridk, wp Register) {
		ls, h := YMM(), YMM()
		VPBROADCASTD(Mem{Base: wp, Disp: 106}, ls)
		var sh, hs []byte
		for g := 0; g < 8; g++ {
			sh = append(sh, byte(4*g), 0, 0, 0)
			hs = append(hs, byte(8-g), 0, 0, 0)
		}
		VPSRLVD(constData("iq3sls", sh), ls, ls)
		t.and(constVec(0xf), ls, ls)
		VPADDD(ls, ls, ls)
		t.or(constVec(1), ls, ls)
		VPSLLD(U8(16), ls, h)
		t.or(h, ls, ls)
		sc := groupScales(ls)
		var wi *wordIdx
		if t.bmi2 {
			wi = newWordIdx(t, 1, rows == 1)
		}
		for g := 0; g < 8; g++ {
			var grid VecVirtual
			if wi != nil {
				hb := GP64()
				MOVBLZX(Mem{Base: wp, Disp: 66 + g}, hb.As32())
				var four [4]Register
				grid = k.gl.dwords(func(i int) Register {
					switch i {
					case 0:
						four = wi.wordsFrom(Mem{Base: wp, Disp: 2 + 8*g}, hb)
					case 4:
						SHRL(U8(4), hb.As32())
						four = wi.wordsFrom(Mem{Base: wp, Disp: 6 + 8*g}, hb)
					}
					return four[i%4]
				})
			} else {
				// VPGATHERDD reads its destination and mask: both
				// defined before the index, so that the allocator keeps
				// all three apart (the instruction faults if any two are
				// the same register).
				grid = YMM()
				m := YMM()
				VPXOR(grid, grid, grid)
				VPCMPEQD(m, m, m)
				i, hb := YMM(), YMM()
				VPMOVZXBD(Mem{Base: wp, Disp: 2 + 8*g}, i)
				VPBROADCASTD(Mem{Base: wp, Disp: 66 + g}, hb)
				VPSLLVD(constData("iq3shbit", hs), hb, hb)
				VPAND(constVec(0x100), hb, hb)
				VPOR(hb, i, i)
				VPGATHERDD(m, Mem{Base: k.gl.base, Index: i, Scale: 4}, grid)
			}
			k.group(g, grid, Mem{Base: wp, Disp: 74 + 4*g}, scaleOf(sc, g))
		}
	})
}
