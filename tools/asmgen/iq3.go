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
	grid   Register   // the grid's base address
	spread VecVirtual // VPSHUFB control: sign byte k/8 over byte k
	bits   VecVirtual // 1<<(k%8) in byte k
	ones   VecVirtual // 1 in every byte
	spill  Mem        // 32 bytes of sign dwords, then 32 of ls words
	acc    VecVirtual // int32 lanes of bsum
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

// group adds ls*sumi of one 32-weight group into k.acc: g its grid
// magnitudes, signs the dword of its four sign bytes (one bit a weight,
// set: negative), a its activations.
func (k *iq3k) group(g VecVirtual, signs Mem, a Mem, ls Mem) {
	s := YMM()
	VPBROADCASTD(signs, s)
	VPSHUFB(k.spread, s, s)
	VPAND(k.bits, s, s)
	VPCMPEQB(k.bits, s, s)
	VPOR(k.ones, s, s) // -1 or +1
	VPSIGNB(s, g, g)
	q := YMM()
	VMOVDQU(a, q)
	VPSIGNB(q, g, g)
	VPABSB(q, q)
	VPMADDUBSW(g, q, q)
	l := YMM()
	VPBROADCASTD(ls, l)
	k.t.dotw(q, l, k.acc)
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

// iq3Loop emits the loop over nb super-blocks of wsize bytes around
// body, which adds bsum into k.acc;
// the block's fp16 d is its first two bytes, grid the table to look up.
func iq3Loop(t *target, name string, wsize int, scale float32, grid Mem, body func(k *iq3k, wp, ap Register)) {
	fn := "dot" + name + t.suffix
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k := newIQ3k(t)
	LEAQ(grid, k.grid)
	sum := XMM()
	VXORPS(sum, sum, sum)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	k.acc = YMM()
	VPXOR(k.acc, k.acc, k.acc)
	body(k, wp, ap)
	f := hsumInt(t, k.acc)
	d := XMM()
	VPBROADCASTW(Mem{Base: wp}, d)
	VCVTPH2PS(d, d)
	VMULSS(Mem{Base: ap}, d, d) // fp16(d)*d8
	VMULSS(d, f, f)
	VADDSS(f, sum, sum)
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	if scale != 1 {
		VMULSS(constU32(math.Float32bits(scale)), sum, sum)
	}
	Store(sum, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// genIQ3XXS emits dotIQ3_XXS<suffix>. The block: d | qs[64] grid indices
// | eight dwords, one a group: four 7-bit sign indices (the eighth sign is
// their parity, ksigns_iq2xs) and ls' = bits 28-31, ls = 2*ls'+1.
func genIQ3XXS(t *target) {
	iq3Loop(t, "IQ3_XXS", iq3XXSSize, 0.25, gridData("iq3xxsGrid", 4, 256), func(k *iq3k, wp, ap Register) {
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
			k.group(grid, k.spill.Offset(4*g), Mem{Base: ap, Disp: 4 + 32*g}, k.spill.Offset(32+4*g))
		}
	})
}

// genIQ13 emits the IQ3 and IQ1 kernels of one target.
func genIQ13(t *target) {
	genIQ3XXS(t)
	genIQ3S(t)
	genIQ1S(t)
	genIQ1M(t)
}

// genIQ3S emits dotIQ3_S<suffix>. The block: d | qs[64] low 8 bits of the
// grid indices | qh[8], one a group, bit m the ninth bit of index m |
// signs[32], one bit a weight | scales[4], a nibble ls' a group (ls =
// 2*ls'+1).
func genIQ3S(t *target) {
	iq3Loop(t, "IQ3_S", iq3SSize, 1, gridData("iq3sGrid", 4, 512), func(k *iq3k, wp, ap Register) {
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
			k.group(grid, Mem{Base: wp, Disp: 74 + 4*g}, Mem{Base: ap, Disp: 4 + 32*g}, k.spill.Offset(32+4*g))
		}
	})
}
