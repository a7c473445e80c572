package main

import (
	"math"

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
//   - the 32 grid magnitudes of a group (0..62) are gathered from
//     core/quant's grid (iq13grid.go), eight dwords per VPGATHERDD;
//   - the weights' signs and the activations' signs go onto the grid
//     bytes (VPSIGNB twice) and |q8| is the unsigned side of VPMADDUBSW:
//     |-128| = 128 fits a byte, so every activation is exact, and the
//     pair sums stay under 2*62*128;
//   - VPMADDWD by the group's ls (in both words of a dword) sums the pairs
//     into int32 lanes, already scaled.
//
// All levels run these 256-bit kernels (the AVX-512 ones with VPDPWSSD).

const (
	iq3XXSSize = 98
	iq3SSize   = 110
)

// iq3k holds the loop invariants of an IQ3 kernel.
type iq3k struct {
	t      *target
	grid   Register     // the grid's base address
	spread VecVirtual   // VPSHUFB control: sign byte k/8 over byte k
	bits   VecVirtual   // 1<<(k%8) in byte k
	ones   VecVirtual   // 1 in every byte
	spill  Mem          // 32 bytes of sign dwords, then 32 of ls words
	acts   []Mem        // the activation rows' Q8_K blocks
	acc    []VecVirtual // int32 lanes of each row's bsum
}

func newIQ3k(t *target) *iq3k {
	k := &iq3k{t: t, grid: GP64(), spread: YMM(), bits: YMM(), ones: YMM()}
	var sp, bt []byte
	for i := 0; i < 32; i++ {
		sp = append(sp, byte(i/8))
		bt = append(bt, byte(1<<(i%8)))
	}
	VMOVDQU(constData("iq3spread", sp), k.spread)
	VMOVDQU(constData("iq3bits", bt), k.bits)
	VPBROADCASTD(constU32(0x01010101), k.ones)
	k.spill = AllocLocal(64)
	return k
}

// gather returns the eight dwords of the grid at the indices idx makes
// (a fresh ymm of eight dword indices).
func (k *iq3k) gather(idx func() VecVirtual) VecVirtual {
	// VPGATHERDD reads its destination and mask: both defined before the
	// index, so that the allocator keeps all three apart (the instruction
	// faults if any two are the same register).
	g, m := YMM(), YMM()
	VPXOR(g, g, g)
	VPCMPEQD(m, m, m)
	i := idx()
	VPGATHERDD(m, Mem{Base: k.grid, Index: i, Scale: 4}, g)
	return g
}

// group adds ls*sumi of 32-weight group gi into every row's k.acc: g its
// grid magnitudes, signs the dword of its four sign bytes (one bit a
// weight, set: negative), ls its dword ls|ls<<16.
func (k *iq3k) group(gi int, g VecVirtual, signs Mem, ls Mem) {
	s := YMM()
	VPBROADCASTD(signs, s)
	VPSHUFB(k.spread, s, s)
	VPAND(k.bits, s, s)
	VPCMPEQB(k.bits, s, s)
	VPOR(k.ones, s, s) // -1 or +1
	VPSIGNB(s, g, g)
	l := YMM()
	VPBROADCASTD(ls, l)
	for j, a := range k.acts {
		q, x := YMM(), YMM()
		VMOVDQU(a.Offset(4+32*gi), q)
		VPSIGNB(q, g, x)
		VPABSB(q, q)
		VPMADDUBSW(x, q, q)
		k.t.dotw(q, l, k.acc[j])
	}
}

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

// iq3Loop emits the kernel over rows (1 or 4) activation rows and nb
// super-blocks of wsize bytes around body, which adds each row's bsum
// into k.acc; the block's fp16 d is its first two bytes, grid the table to
// look up, scale the reference's factor on the final sum.
func iq3Loop(t *target, name string, rows, wsize int, scale float32, grid Mem, body func(k *iq3k, wp Register)) {
	fn, wp, ap, nb, acts := actRows(t, name, rows)
	k := newIQ3k(t)
	k.acts = acts
	LEAQ(grid, k.grid)
	sums := make([]VecVirtual, rows)
	for j := range sums {
		sums[j] = XMM()
		VXORPS(sums[j], sums[j], sums[j])
	}
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	k.acc = make([]VecVirtual, rows)
	for j := range k.acc {
		k.acc[j] = YMM()
		VPXOR(k.acc[j], k.acc[j], k.acc[j])
	}
	body(k, wp)
	dx := XMM()
	VPBROADCASTW(Mem{Base: wp}, dx)
	VCVTPH2PS(dx, dx)
	for j, a := range acts {
		f := hsumInt(t, k.acc[j])
		d := XMM()
		VMULSS(a, dx, d) // fp16(d)*d8
		VMULSS(d, f, f)
		VADDSS(f, sums[j], sums[j])
	}
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	if scale != 1 {
		for _, s := range sums {
			VMULSS(constU32(math.Float32bits(scale)), s, s)
		}
	}
	storeRows(sums)
	VZEROUPPER()
	RET()
}

// genIQ3XXS emits dotIQ3_XXS<suffix>. The block: d | qs[64] grid indices
// | eight dwords, one a group: four 7-bit sign indices (the eighth sign is
// their parity, ksigns_iq2xs) and ls' = bits 28-31, ls = 2*ls'+1.
func genIQ3XXS(t *target, rows int) {
	iq3Loop(t, "IQ3_XXS", rows, iq3XXSSize, 0.25, gridData("iq3xxsGrid", 4, 256), func(k *iq3k, wp Register) {
		x := YMM()
		VMOVDQU(Mem{Base: wp, Disp: 66}, x)
		// ls|ls<<16 per group.
		ls, h := YMM(), YMM()
		VPSRLD(U8(28), x, ls)
		VPADDD(ls, ls, ls)
		VPOR(constVec(1), ls, ls)
		VPSLLD(U8(16), ls, h)
		VPOR(h, ls, ls)
		VMOVDQU(ls, k.spill.Offset(32))
		// The four 7-bit fields into the four bytes of each dword...
		t1, t2 := YMM(), YMM()
		VPAND(constVec(0x00003fff), x, t1)
		VPSLLD(U8(2), x, t2)
		VPAND(constVec(0x3fff0000), t2, t2)
		VPOR(t2, t1, t1)
		u := YMM()
		VPAND(constVec(0x007f007f), t1, u)
		VPSLLD(U8(1), t1, t2)
		VPAND(constVec(0x7f007f00), t2, t2)
		VPOR(t2, u, u)
		// ...and each byte's parity into its bit 7: bit 0 of p ends up the
		// xor of bits 0-7 of the same byte (no shift reaches further).
		p := YMM()
		VPSRLD(U8(4), u, p)
		VPXOR(u, p, p)
		VPSRLD(U8(2), p, t2)
		VPXOR(t2, p, p)
		VPSRLD(U8(1), p, t2)
		VPXOR(t2, p, p)
		VPAND(constVec(0x01010101), p, p)
		VPSLLD(U8(7), p, p)
		VPOR(p, u, u)
		VMOVDQU(u, k.spill)
		for g := 0; g < 8; g++ {
			grid := k.gather(func() VecVirtual {
				i := YMM()
				VPMOVZXBD(Mem{Base: wp, Disp: 2 + 8*g}, i)
				return i
			})
			k.group(g, grid, k.spill.Offset(4*g), k.spill.Offset(32+4*g))
		}
	})
}

// genIQ13 emits the IQ3 and IQ1 kernels of one target.
func genIQ13(t *target) {
	for _, rows := range []int{1, 4} {
		genIQ3XXS(t, rows)
		genIQ3S(t, rows)
		genIQ1S(t, rows)
		genIQ1M(t, rows)
	}
}

// genIQ3S emits dotIQ3_S<suffix>. The block: d | qs[64] low 8 bits of the
// grid indices | qh[8], one a group, bit m the ninth bit of index m |
// signs[32], one bit a weight | scales[4], a nibble ls' a group (ls =
// 2*ls'+1).
func genIQ3S(t *target, rows int) {
	iq3Loop(t, "IQ3_S", rows, iq3SSize, 1, gridData("iq3sGrid", 4, 512), func(k *iq3k, wp Register) {
		ls, h := YMM(), YMM()
		VPBROADCASTD(Mem{Base: wp, Disp: 106}, ls)
		var sh, hs []byte
		for g := 0; g < 8; g++ {
			sh = append(sh, byte(4*g), 0, 0, 0)
			hs = append(hs, byte(8-g), 0, 0, 0)
		}
		VPSRLVD(constData("iq3sls", sh), ls, ls)
		VPAND(constVec(0xf), ls, ls)
		VPADDD(ls, ls, ls)
		VPOR(constVec(1), ls, ls)
		VPSLLD(U8(16), ls, h)
		VPOR(h, ls, ls)
		VMOVDQU(ls, k.spill.Offset(32))
		for g := 0; g < 8; g++ {
			grid := k.gather(func() VecVirtual {
				i, hb := YMM(), YMM()
				VPMOVZXBD(Mem{Base: wp, Disp: 2 + 8*g}, i)
				VPBROADCASTD(Mem{Base: wp, Disp: 66 + g}, hb)
				VPSLLVD(constData("iq3shbit", hs), hb, hb)
				VPAND(constVec(0x100), hb, hb)
				VPOR(hb, i, i)
				return i
			})
			k.group(g, grid, Mem{Base: wp, Disp: 74 + 4*g}, k.spill.Offset(32+4*g))
		}
	})
}
