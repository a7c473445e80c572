package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// constVec returns a 32-byte constant with v in every dword, for AVX2
// instructions that take a memory operand but have no embedded broadcast.
func constVec(v uint32) Mem {
	var b []byte
	for i := 0; i < 8; i++ {
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return constData(fmt.Sprintf("v32_%08x", v), b)
}

// genQuantizeQ8K emits quantizeQ8K<suffix>(x *float32, y *byte, nb int):
// quantize_row_q8_K_ref on nb blocks, byte for byte. It needs only AVX2.
//
// The reference rounds with ggml's nearest_int (add 1.5*2^23, keep the
// mantissa), not with a conversion instruction: both agree on every finite
// in-range value, but only the trick reproduces what NaN and Inf inputs
// give, and the low byte is stored without saturation, as C's int8_t cast.
func genQuantizeQ8K(suffix string) {
	name := "quantizeQ8K" + suffix
	TEXT(name, NOSPLIT, "func(x *float32, y *byte, nb int)")
	Pragma("noescape")
	xp := Load(Param("x"), GP64())
	yp := Load(Param("y"), GP64())
	nb := Load(Param("nb"), GP64())
	absMask := YMM()
	VMOVDQU(constVec(0x7fffffff), absMask)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)

	// amax over the block; VMAXPS returns its second source on NaN, and the
	// running maximum is that source, so NaN elements are skipped.
	var m [4]VecVirtual
	for k := range m {
		m[k] = YMM()
		VXORPS(m[k], m[k], m[k])
	}
	for i := 0; i < 32; i++ {
		v := YMM()
		VANDPS(Mem{Base: xp, Disp: 32 * i}, absMask, v)
		VMAXPS(m[i%4], v, m[i%4])
	}
	VMAXPS(m[1], m[0], m[0])
	VMAXPS(m[3], m[2], m[2])
	VMAXPS(m[2], m[0], m[0])
	hx := XMM()
	VEXTRACTF128(U8(1), m[0], hx)
	amax := XMM()
	VMAXPS(hx, m[0].AsX(), amax)
	VMOVHLPS(amax, amax, hx)
	VMAXPS(hx, amax, amax)
	VMOVSHDUP(amax, hx)
	VMAXSS(hx, amax, amax)

	zero := XMM()
	VXORPS(zero, zero, zero)
	VUCOMISS(zero, amax)
	JNE(LabelRef("nonzero" + name))
	// An all-zero block: ggml leaves bsums alone, k3 clears them too.
	for off := 0; off < 288; off += 32 {
		VMOVDQU(zero.AsY(), Mem{Base: yp, Disp: off})
	}
	MOVL(U32(0), Mem{Base: yp, Disp: 288})
	JMP(LabelRef("next" + name))

	Label("nonzero" + name)
	// The first element whose magnitude is amax gives the scale's sign.
	amaxB := YMM()
	VBROADCASTSS(amax, amaxB)
	p := GP64()
	MOVQ(xp, p)
	bits := GP64()
	Label("find" + name)
	v := YMM()
	VANDPS(Mem{Base: p}, absMask, v)
	VCMPPS(U8(0), amaxB, v, v)
	VMOVMSKPS(v, bits.As32())
	TESTL(bits.As32(), bits.As32())
	JNZ(LabelRef("found" + name))
	ADDQ(U8(32), p)
	JMP(LabelRef("find" + name))
	Label("found" + name)
	BSFQ(bits, bits)
	maxv := XMM()
	VMOVSS(Mem{Base: p, Index: bits, Scale: 4}, maxv)
	iscale := XMM()
	VMOVSS(constU32(0xc2fe0000), iscale) // -127
	VDIVSS(maxv, iscale, iscale)
	d := XMM()
	VMOVSS(constU32(0x3f800000), d) // 1
	VDIVSS(iscale, d, d)
	VMOVSS(d, Mem{Base: yp})
	isB := YMM()
	VBROADCASTSS(iscale, isB)
	perm := YMM()
	VMOVDQU(constData("permQ8K", []byte{0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0}), perm)

	for g := 0; g < 8; g++ {
		var r [4]VecVirtual
		for k := range r {
			r[k] = YMM()
			VMULPS(Mem{Base: xp, Disp: 128*g + 32*k}, isB, r[k])
			VADDPS(constVec(0x4b400000), r[k], r[k]) // 12582912
			VPAND(constVec(0x007fffff), r[k], r[k])
			VPSUBD(constVec(0x00400000), r[k], r[k])
			VPMINSD(constVec(127), r[k], r[k])
			VPAND(constVec(0xff), r[k], r[k])
		}
		VPACKUSDW(r[1], r[0], r[0])
		VPACKUSDW(r[3], r[2], r[2])
		VPACKUSWB(r[2], r[0], r[0])
		VPERMD(r[0], perm, r[0])
		VMOVDQU(r[0], Mem{Base: yp, Disp: 4 + 32*g})
		// bsums: VPSADBW adds 8 bytes; bias them to unsigned first.
		VPXOR(constVec(0x80808080), r[0], r[0])
		z := YMM()
		VPXOR(z, z, z)
		VPSADBW(z, r[0], r[0])
		s2 := YMM()
		VPSHUFD(U8(0x4e), r[0], s2)
		VPADDQ(s2, r[0], r[0])
		lo, hi := GP32(), GP32()
		VMOVD(r[0].AsX(), lo)
		SUBL(U32(2048), lo)
		MOVW(lo.As16(), Mem{Base: yp, Disp: q8KBsums + 4*g})
		xh := XMM()
		VEXTRACTI128(U8(1), r[0], xh)
		VMOVD(xh, hi)
		SUBL(U32(2048), hi)
		MOVW(hi.As16(), Mem{Base: yp, Disp: q8KBsums + 4*g + 2})
	}

	Label("next" + name)
	ADDQ(U32(1024), xp)
	ADDQ(U32(q8KSize), yp)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER() // Go code after us uses legacy SSE encodings
	RET()
}
