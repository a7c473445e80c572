package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The 32-element block types against Q8_0 activations, and the plain float
// dot products. Each 32-block is one ymm of quants; its integer sum is
// exact (VPMADDWD of sign-extended bytes for Q8_0, since the VPSIGNB trick
// of ggml's AVX2 code overflows on a -128 weight times a -128 activation).

// blockLoop emits dot<name><suffix>(w, a *byte, nb int) float32 over nb
// blocks; body adds the contribution of the blocks at w and a into acc
// (wide: a full-width vector, else a ymm). Two blocks per iteration halve
// the loop overhead, which is a fair part of a 32-element block's work.
func blockLoop(t *target, name string, wsize, asize int, wide bool, pre func(), body func(w, a Mem, acc VecVirtual)) {
	TEXT("dot"+name+t.suffix, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	// Four blocks per iteration, each into its own accumulator: one block's
	// work is short enough that a single FMA chain (4 cycles a link) would
	// bound the loop.
	const unroll = 4
	var acc [unroll]VecVirtual
	for i := range acc {
		acc[i] = YMM()
		if wide {
			acc[i] = t.vec()
		}
		t.zerof(acc[i])
	}
	if pre != nil {
		pre() // loop-invariant constants
	}
	Label("loopn" + name)
	CMPQ(nb, U8(unroll))
	JB(LabelRef("tail" + name))
	for i := range acc {
		body(Mem{Base: wp, Disp: i * wsize}, Mem{Base: ap, Disp: i * asize}, acc[i])
	}
	ADDQ(U32(unroll*wsize), wp)
	ADDQ(U32(unroll*asize), ap)
	SUBQ(U8(unroll), nb)
	JMP(LabelRef("loopn" + name))
	Label("tail" + name)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	body(Mem{Base: wp}, Mem{Base: ap}, acc[0])
	ADDQ(U32(wsize), wp)
	ADDQ(U32(asize), ap)
	DECQ(nb)
	JMP(LabelRef("tail" + name))
	Label("done" + name)
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[2], acc[0], acc[0])
	var s VecVirtual
	if wide {
		s = t.hsum(acc[0])
	} else {
		s = t.hsumY(acc[0])
	}
	Store(s, ReturnIndex(0))
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}

// halfProduct sets wide to fp16(x)*fp16(y) for the fp16 values at wm and
// am, in every lane. (An fp16 table indexed by the scales is no faster on
// a hot row and misses the cache on a streamed matrix.)
func halfProduct(wm, am Mem, wide VecVirtual) {
	// Four bytes at wm: the weight scale and two quants, which the
	// conversion ignores; every block type here has at least 18 bytes.
	x := XMM()
	VMOVD(wm, x)
	VPINSRW(U8(1), am, x, x)
	VCVTPH2PS(x, x)
	y := XMM()
	VMOVSHDUP(x, y)
	VMULSS(y, x, x)
	VBROADCASTSS(x, wide)
}

// genQ8_0 uses ggml's sign trick: |x| (unsigned, 128 for -128) times y
// with x's sign. It is exact as long as no activation is -128 (then -y
// would wrap), which QuantizeActivation guarantees: the Q8_0 quantizer
// scales the largest magnitude to 127 and maps NaN to 0.
func genQ8_0(t *target) {
	var ones VecVirtual
	pre := func() {
		if !t.vnni {
			ones = YMM()
			VPBROADCASTD(constU32(0x00010001), ones)
		}
	}
	blockLoop(t, "Q8_0", 34, 34, false, pre, func(w, a Mem, acc VecVirtual) {
		x, y, ax := YMM(), YMM(), YMM()
		VMOVDQU(w.Offset(2), x)
		VMOVDQU(a.Offset(2), y)
		VPSIGNB(x, x, ax)
		VPSIGNB(x, y, y)
		p := YMM()
		if t.vnni {
			VPXOR(p, p, p)
			vnniOp("VPDPBUSD", y, ax, p)
		} else {
			VPMADDUBSW(y, ax, p)
			VPMADDWD(ones, p, p)
		}
		d := YMM()
		halfProduct(w, a, d)
		finishInt(p, d, acc)
	})
}

// nibbles32 loads the 16 bytes at m as 32 four-bit quants in element order
// (low nibbles are elements 0..15, high nibbles 16..31).
func (t *target) nibbles32(m Mem, c0F VecVirtual) VecVirtual {
	q, hi := XMM(), XMM()
	t.mov(m, q)
	VPSRLW(U8(4), q, hi)
	u := YMM()
	if t.evex() {
		VINSERTI32X4(U8(1), hi, q.AsY(), u)
	} else {
		VINSERTI128(U8(1), hi, q.AsY(), u)
	}
	t.and(c0F, u, u)
	return u
}

// offsetDot returns sum((u-o)*y) over a 32-element block as eight int32
// lanes: VPMADDUBSW of the unsigned quants u, minus that of o (a splat of
// the offset byte), as int16 pairs; neither product can saturate for
// u, o <= 31. Exact for every activation byte, -128 included.
func offsetDot(t *target, u, o, ones VecVirtual, y Mem) VecVirtual {
	p, c := YMM(), YMM()
	if t.vnni {
		// VPDPBUSD sums four products straight into int32 lanes.
		t.zero(p)
		t.zero(c)
		vnniOp("VPDPBUSD", y, u, p)
		vnniOp("VPDPBUSD", y, o, c)
		VPSUBD(c, p, p)
		return p
	}
	VPMADDUBSW(y, u, p)
	VPMADDUBSW(y, o, c)
	VPSUBW(c, p, p)
	VPMADDWD(ones, p, p)
	return p
}

// consts32 are the constants the 32-element kernels share.
type consts32 struct{ c0F, off, ones VecVirtual }

func (t *target) consts32(off uint32) *consts32 {
	k := &consts32{YMM(), YMM(), YMM()}
	VPBROADCASTD(constU32(0x0f0f0f0f), k.c0F)
	VPBROADCASTD(constU32(off*0x01010101), k.off)
	VPBROADCASTD(constU32(0x00010001), k.ones)
	return k
}

func genQ4_0(t *target) {
	var k *consts32
	blockLoop(t, "Q4_0", 18, 34, false, func() { k = t.consts32(8) }, func(w, a Mem, acc VecVirtual) {
		u := t.nibbles32(w.Offset(2), k.c0F)
		p := offsetDot(t, u, k.off, k.ones, a.Offset(2))
		d := YMM()
		halfProduct(w, a, d)
		finishInt(p, d, acc)
	})
}

// genQ5_0: the fifth bits come from the 32-bit qh word, spread to one byte
// per element (VPSHUFB replicates byte k of qh over elements 8k..8k+7, an OR
// with every bit but the element's own and a compare with all-ones test it).
func genQ5_0(t *target) {
	var k *consts32
	var spread, bits, all1, c10 VecVirtual
	pre := func() {
		k = t.consts32(16)
		c10 = YMM()
		VPBROADCASTD(constU32(0x10101010), c10)
		if t.evex() {
			return
		}
		spread, bits, all1 = YMM(), YMM(), YMM()
		VMOVDQU(constData("q5spread", []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
			2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}), spread)
		VPBROADCASTQ(constData("q5bits", []byte{0xfe, 0xfd, 0xfb, 0xf7, 0xef, 0xdf, 0xbf, 0x7f}), bits)
		VPCMPEQB(all1, all1, all1)
	}
	blockLoop(t, "Q5_0", 22, 34, false, pre, func(w, a Mem, acc VecVirtual) {
		u := t.nibbles32(w.Offset(6), k.c0F)
		if t.evex() {
			// AVX-512 reads qh as a byte mask: add 16 where its bit is set.
			m := K()
			KMOVD(w.Offset(2), m)
			VPADDB(c10, u, m, u)
		} else {
			h := YMM()
			VPBROADCASTD(w.Offset(2), h)
			VPSHUFB(spread, h, h)
			VPOR(bits, h, h)
			VPCMPEQB(all1, h, h)
			VPAND(c10, h, h)
			VPOR(h, u, u)
		}
		p := offsetDot(t, u, k.off, k.ones, a.Offset(2))
		d := YMM()
		halfProduct(w, a, d)
		finishInt(p, d, acc)
	})
}

// genMXFP4: E2M1 codes map to their doubled values plus 12 (all in
// [0, 24]) through one VPSHUFB; the shared exponent's scale, E8M0/2, comes
// from a 256-entry table.
func genMXFP4(t *target) {
	var k *consts32
	var table VecVirtual
	pre := func() {
		k = t.consts32(12)
		table = YMM()
		t.bcast16(constData("mxfp4lut", []byte{12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0}), table)
	}
	var e8m0 []byte
	for x := 0; x < 256; x++ {
		var bits uint32
		if x < 2 {
			bits = 0x00200000 << x
		} else {
			bits = uint32(x-1) << 23
		}
		e8m0 = append(e8m0, byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24))
	}
	e8m0Table := constData("e8m0half", e8m0)
	blockLoop(t, "MXFP4", 17, 34, false, pre, func(w, a Mem, acc VecVirtual) {
		u := t.nibbles32(w.Offset(1), k.c0F)
		VPSHUFB(u, table, u)
		p := offsetDot(t, u, k.off, k.ones, a.Offset(2))
		e := GP64()
		MOVBQZX(w, e)
		tab := GP64()
		LEAQ(e8m0Table, tab)
		x := XMM()
		VMOVD(a, x) // the activation scale and two quants
		VCVTPH2PS(x, x)
		VMULSS(Mem{Base: tab, Index: e, Scale: 4}, x, x)
		d := YMM()
		VBROADCASTSS(x, d)
		finishInt(p, d, acc)
	})
}

// genFloat emits dot<kind><suffix>(w, a *byte, n int) float32 for n
// elements, n a multiple of one iteration (4 vectors of f32: 32 elements
// for 256-bit vectors, 64 for 512-bit, twice that for BF16); the Go
// wrapper adds the tail.
func genFloat(t *target, kind string) {
	name := "dot" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(w, a *byte, n int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	n := Load(Param("n"), GP64())
	lanes := t.w / 4
	esize := 4
	if kind != "F32" {
		esize = 2
	}
	var acc [4]VecVirtual
	for k := range acc {
		acc[k] = t.vec()
		VXORPS(acc[k], acc[k], acc[k])
	}
	perK := lanes // elements per accumulator per iteration
	var hiMask Op
	if kind == "BF16" {
		perK = 2 * lanes
		hiMask = t.konst(0xffff0000)
	}
	SHRQ(U8(map[int]int{32: 5, 64: 6, 128: 7}[4*perK]), n) // iterations
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	for k := range acc {
		off := k * perK * esize
		switch kind {
		case "F32":
			v := t.vec()
			VMOVUPS(Mem{Base: wp, Disp: off}, v)
			VFMADD231PS(Mem{Base: ap, Disp: off}, v, acc[k])
		case "F16":
			v, u := t.vec(), t.vec()
			VCVTPH2PS(Mem{Base: wp, Disp: off}, v)
			VCVTPH2PS(Mem{Base: ap, Disp: off}, u)
			VFMADD231PS(u, v, acc[k])
		case "BF16":
			// A bf16 is the top half of a float32: a dword's high half is
			// already an f32 once the low half is masked off, its low half
			// becomes one shifted up. The dot product does not care that
			// this pairs even and odd elements in different vectors.
			w, a := t.vec(), t.vec()
			t.mov(Mem{Base: wp, Disp: off}, w)
			t.mov(Mem{Base: ap, Disp: off}, a)
			we, ae := t.vec(), t.vec()
			VPSLLD(U8(16), w, we)
			VPSLLD(U8(16), a, ae)
			VFMADD231PS(ae, we, acc[k])
			t.and(hiMask, w, w)
			t.and(hiMask, a, a)
			VFMADD231PS(a, w, acc[k])
		}
	}
	ADDQ(U32(4*perK*esize), wp)
	ADDQ(U32(4*perK*esize), ap)
	DECQ(n)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	Store(t.hsum(acc[0]), ReturnIndex(0))
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}

// finishInt adds isum (int32 lanes) times the block scale into acc.
func finishInt(isum, d, acc VecVirtual) {
	VCVTDQ2PS(isum, isum)
	VFMADD231PS(isum, d, acc)
}
