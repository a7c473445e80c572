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
// blocks; body adds a block's contribution into acc (wide: a full-width
// vector, else a ymm).
func blockLoop(t *target, name string, wsize, asize int, wide bool, pre func(), body func(wp, ap Register, acc VecVirtual)) {
	TEXT("dot"+name+t.suffix, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	acc := YMM()
	if wide {
		acc = t.vec()
	}
	VXORPS(acc, acc, acc)
	if pre != nil {
		pre() // loop-invariant constants
	}
	TESTQ(nb, nb)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	body(wp, ap, acc)
	ADDQ(U32(wsize), wp)
	ADDQ(U32(asize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	var s VecVirtual
	if wide {
		s = t.hsum(acc)
	} else {
		s = hsumY(acc)
	}
	Store(s, ReturnIndex(0))
	RET()
}

// halfProduct returns fp16(x)*fp16(y) for the fp16 values at wm and am,
// broadcast into a register of the given width.
func halfProduct(wm, am Mem, wide VecVirtual) {
	r1, r2 := GP32(), GP32()
	MOVWLZX(wm, r1)
	MOVWLZX(am, r2)
	SHLL(U8(16), r2)
	ORL(r1, r2)
	x := XMM()
	VMOVD(r2, x)
	VCVTPH2PS(x, x)
	y := XMM()
	VMOVSHDUP(x, y)
	VMULSS(y, x, x)
	VBROADCASTSS(x, wide)
}

func genQ8_0(t *target) {
	blockLoop(t, "Q8_0", 34, 34, t.zmm(), nil, func(wp, ap Register, acc VecVirtual) {
		d := YMM()
		if t.zmm() {
			// One block is 32 words: a single zmm.
			d = ZMM()
			x, y := ZMM(), ZMM()
			VPMOVSXBW(Mem{Base: wp, Disp: 2}, x)
			VPMOVSXBW(Mem{Base: ap, Disp: 2}, y)
			VPMADDWD(y, x, x)
			halfProduct(Mem{Base: wp}, Mem{Base: ap}, d)
			finishInt(x, d, acc)
			return
		}
		var s [2]VecVirtual
		for h := 0; h < 2; h++ {
			x, y := YMM(), YMM()
			VPMOVSXBW(Mem{Base: wp, Disp: 2 + 16*h}, x)
			VPMOVSXBW(Mem{Base: ap, Disp: 2 + 16*h}, y)
			VPMADDWD(y, x, x)
			s[h] = x
		}
		VPADDD(s[1], s[0], s[0])
		halfProduct(Mem{Base: wp}, Mem{Base: ap}, d)
		finishInt(s[0], d, acc)
	})
}

func genQ4_0(t *target) {
	var c0F, c08, ones VecVirtual
	pre := func() {
		c0F, c08, ones = YMM(), YMM(), YMM()
		VPBROADCASTD(constU32(0x0f0f0f0f), c0F)
		VPBROADCASTD(constU32(0x08080808), c08)
		VPBROADCASTD(constU32(0x00010001), ones)
	}
	blockLoop(t, "Q4_0", 18, 34, false, pre, func(wp, ap Register, acc VecVirtual) {
		q, hi := XMM(), XMM()
		t.mov(Mem{Base: wp, Disp: 2}, q)
		VPSRLW(U8(4), q, hi)
		u := YMM()
		if t.zmm() {
			VINSERTI32X4(U8(1), hi, q.AsY(), u)
		} else {
			VINSERTI128(U8(1), hi, q.AsY(), u)
		}
		t.and(c0F, u, u)
		// sum((q-8)*y) = sum(q*y) - sum(8*y), each as int16 pairs.
		p, c := YMM(), YMM()
		VPMADDUBSW(Mem{Base: ap, Disp: 2}, u, p)
		VPMADDUBSW(Mem{Base: ap, Disp: 2}, c08, c)
		VPSUBW(c, p, p)
		VPMADDWD(ones, p, p)
		d := YMM()
		halfProduct(Mem{Base: wp}, Mem{Base: ap}, d)
		finishInt(p, d, acc)
	})
}

// genFloat emits dot<kind><suffix>(w, a *byte, n int) float32 for n
// elements, n a multiple of 4 vectors; the Go wrapper adds the tail.
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
	SHRQ(U8(map[int]int{8: 5, 16: 6}[lanes]), n) // iterations of 4 vectors
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	for k := range acc {
		off := k * lanes * esize
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
			v, u := t.vec(), t.vec()
			VPMOVZXWD(Mem{Base: wp, Disp: off}, v)
			VPSLLD(U8(16), v, v)
			VPMOVZXWD(Mem{Base: ap, Disp: off}, u)
			VPSLLD(U8(16), u, u)
			VFMADD231PS(u, v, acc[k])
		}
	}
	ADDQ(U32(4*lanes*esize), wp)
	ADDQ(U32(4*lanes*esize), ap)
	DECQ(n)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	Store(t.hsum(acc[0]), ReturnIndex(0))
	RET()
}
