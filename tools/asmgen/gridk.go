package main

import (
	"math"
	"math/bits"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The IQ2 and IQ3 kernels (iq2.go, iq3.go) share their loop: per 32-weight
// group, grid magnitudes (gridload.go), their signs as a mask, and the
// group's scale; what the types differ in is how they store those.

// gridk holds the loop invariants and accumulators of an IQ2 or IQ3
// kernel.
type gridk struct {
	t  *target
	gl *gridLoad
	// EVEX: zero, for the masked negation. AVX2: the sign vector's
	// VPSHUFB control (sign byte k/8 over byte k), 1<<(k%8) in byte k,
	// 1 in every byte.
	zero VecVirtual
	// (Memory operands in the four-row AVX2 kernels, which need all
	// sixteen registers.)
	spread, bits, ones Op
	spill              Mem            // 32 bytes of sign dwords
	acts               []Mem          // the activation rows' Q8_K blocks
	acc                [][]VecVirtual // acc[c][j]: row j's int32 lanes, chain c
	sc                 [2]VecVirtual  // the super-block's scales (scaleOf)
	signPos            [8]int         // the spill's dword of group g's signs
}

func newGridK(t *target, base Register, rows int) *gridk {
	k := &gridk{t: t, gl: newGridLoad(t, base)}
	if t.evex() {
		k.zero = YMM()
		t.zero(k.zero)
	} else {
		var sp, bt []byte
		for i := 0; i < 32; i++ {
			sp = append(sp, byte(i/8))
			bt = append(bt, byte(1<<(i%8)))
		}
		k.spread, k.bits, k.ones = constData("iq3spread", sp), constData("iq3bits", bt), constVec(0x01010101)
		if rows == 1 {
			r := [3]VecVirtual{YMM(), YMM(), YMM()}
			VMOVDQU(k.spread, r[0])
			VMOVDQU(k.bits, r[1])
			VMOVDQU(k.ones, r[2])
			k.spread, k.bits, k.ones = r[0], r[1], r[2]
		}
	}
	k.spill = AllocLocal(32)
	return k
}

// group adds ls*sumi of 32-weight group gi into every row's accumulator:
// g its grid magnitudes, signs the dword of its 32 sign bits (set:
// negative), l its scale words (scaleOf).
func (k *gridk) group(gi int, g VecVirtual, signs Mem, l VecVirtual) {
	if k.t.evex() {
		m := K()
		KMOVD(signs, m)
		VPSUBB(g, k.zero, m, g)
	} else {
		s := YMM()
		VPBROADCASTD(signs, s)
		VPSHUFB(k.spread, s, s)
		VPAND(k.bits, s, s)
		VPCMPEQB(k.bits, s, s)
		VPOR(k.ones, s, s) // -1 or +1
		VPSIGNB(s, g, g)
	}
	for j, a := range k.acts {
		q, x := YMM(), YMM()
		k.t.mov(a.Offset(4+32*gi), q)
		VPSIGNB(q, g, x)
		VPABSB(q, q)
		VPMADDUBSW(x, q, q)
		k.t.dotw(q, l, k.acc[gi%len(k.acc)][j])
	}
}

// zeroSums returns a row loop's float sums, one an activation row, zeroed.
func zeroSums(rows int) []VecVirtual {
	sums := make([]VecVirtual, rows)
	for j := range sums {
		sums[j] = XMM()
		VXORPS(sums[j], sums[j], sums[j])
	}
	return sums
}

// newChains returns one block's int32 accumulators, zeroed, [chain][row]:
// two chains on one row (groups alternate between them, so two sums are in
// flight), one on several rows (the rows are independent already).
func newChains(t *target, rows int) [][]VecVirtual {
	chains := 1
	if rows == 1 {
		chains = 2
	}
	acc := make([][]VecVirtual, chains)
	for c := range acc {
		acc[c] = make([]VecVirtual, rows)
		for j := range acc[c] {
			acc[c][j] = YMM()
			t.zero(acc[c][j])
		}
	}
	return acc
}

// foldChains adds row j's second chain (if any) into its first and returns
// the first.
func foldChains(acc [][]VecVirtual, j int) VecVirtual {
	s := acc[0][j]
	if len(acc) == 2 {
		VPADDD(acc[1][j], s, s)
	}
	return s
}

// gridLoop emits the kernel over rows (1 or 4) activation rows and nb
// super-blocks of wsize bytes around body, which adds each row's bsum
// into k.acc; the block's fp16 d is its first two bytes, grid the table to
// look up, scale the reference's factor on the final sum.
func gridLoop(t *target, name string, rows, wsize int, scale float32, grid Mem, body func(k *gridk, wp Register)) {
	fn, wp, ap, nb, acts := actRows(t, name, rows)
	base := GP64()
	LEAQ(grid, base)
	k := newGridK(t, base, rows)
	k.acts = acts
	sums := zeroSums(rows)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	k.acc = newChains(t, rows)
	body(k, wp)
	dx := XMM()
	VPBROADCASTW(Mem{Base: wp}, dx)
	VCVTPH2PS(dx, dx)
	for j, a := range acts {
		f := hsumInt(t, foldChains(k.acc, j))
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

// xxsAux decodes IQ2_XXS's and IQ3_XXS's eight aux dwords x, one a group
// (four 7-bit sign indices, the eighth sign of each byte their parity as
// ksigns_iq2xs has it, and ls' in bits 28-31): the sign dwords into the
// spill, ls|ls<<16 (ls = 2*ls'+1) into k.sc. x holds group g's dword at
// dword pos[g], which is where the spill keeps its signs; the two qwords
// of groups 0-3 are x's qwords lo[0], lo[1], those of 4-7 hi[0], hi[1].
// The signs go first: every group waits for them.
func (k *gridk) xxsAux(x VecVirtual, pos [8]int, lo, hi [2]uint8) {
	t := k.t
	k.signPos = pos
	// The four 7-bit fields into the four bytes of each dword...
	t1, t2 := YMM(), YMM()
	t.and(constVec(0x00003fff), x, t1)
	VPSLLD(U8(2), x, t2)
	t.and(constVec(0x3fff0000), t2, t2)
	t.or(t2, t1, t1)
	u := YMM()
	t.and(constVec(0x007f007f), t1, u)
	VPSLLD(U8(1), t1, t2)
	t.and(constVec(0x7f007f00), t2, t2)
	t.or(t2, u, u)
	parity7(t, u)
	t.movStore(u, k.spill)
	// ls|ls<<16 per group, then groupScales' registers.
	ls, h := YMM(), YMM()
	VPSRLD(U8(28), x, ls)
	VPADDD(ls, ls, ls)
	t.or(constVec(1), ls, ls)
	VPSLLD(U8(16), ls, h)
	t.or(h, ls, ls)
	k.sc = [2]VecVirtual{YMM(), YMM()}
	VPERMQ(U8(lo[0]|lo[1]<<2|lo[0]<<4|lo[1]<<6), ls, k.sc[0])
	VPERMQ(U8(hi[0]|hi[1]<<2|hi[0]<<4|hi[1]<<6), ls, k.sc[1])
}

// parity7 sets bit 7 of every byte of u, whose bits 0-6 hold a sign index,
// to their parity (ksigns_iq2xs: an even number of negative signs): the
// xor of two VPSHUFB lookups of 0x80*parity, one per nibble (a short
// dependency chain: every group of the super-block waits for it).
func parity7(t *target, u VecVirtual) {
	var par []byte
	for h := 0; h < 2; h++ {
		for i := 0; i < 16; i++ {
			par = append(par, byte(0x80*(bits.OnesCount8(uint8(i))&1)))
		}
	}
	lo, hi, tab := YMM(), YMM(), YMM()
	t.mov(constData("iq2par", par), tab)
	t.and(constVec(0x0f0f0f0f), u, lo)
	VPSRLD(U8(4), u, hi)
	t.and(constVec(0x0f0f0f0f), hi, hi)
	VPSHUFB(lo, tab, lo)
	VPSHUFB(hi, tab, hi)
	t.xor(hi, lo, lo)
	t.or(lo, u, u)
}
