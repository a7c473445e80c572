package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tqb4DotTQ2_0<suffix>(w, a *byte, nb int) float32 is TQ2_0 · Q8_K on one
// row, bit for bit the reference (tq.go says how), four super-blocks at a
// time: the one-row kernel of tq.go spent most of a block on its own
// horizontal reduction and scalar float step. Here four blocks' integer
// accumulators are reduced together (one transpose-add), their four
// float(sumi)*(d*d8) made lane-wise, and only the four adds into sumf,
// which the reference orders block by block, stay scalar. With VNNI each
// block's accumulator starts at -sum(a) (VPMADDWD of the bsums with -1
// words: the reference's trit-1), so the bsums cost no subtraction. The
// 512-bit kernels put runs l and l+1 of a half in one zmm (tqx4.go), whose
// activations are 64 consecutive bytes, read by VPDPBUSD from memory.
// Fewer than four blocks left run one at a time.

// tqb4Block returns block b's sum(a*(t-1)) (int32 lanes, full width) of
// the blocks at wp and ap, b blocks on.
func (k *tqk) tqb4Block(wp, ap Register, b int, neg, onesW VecVirtual) VecVirtual {
	t := k.t
	a := Mem{Base: ap, Disp: b * q8KSize}
	bs := a.Offset(4 + 256)
	acc := t.vec()
	if t.vnni {
		VPMADDWD(bs, neg, acc.AsY()) // zero-extends into a zmm
	} else {
		t.zero(acc)
	}
	genTQ2Runs(k, Mem{Base: wp, Disp: b * tq2Size}, func(run tqRun) {
		m := a.Offset(4 + run.off)
		if t.vnni {
			vnniOp("VPDPBUSD", m, run.codes, acc)
			return
		}
		av := t.vec()
		t.mov(m, av)
		VPMADDUBSW(av, run.codes, av) // pair sums <= 768, eight runs a word
		VPADDW(av, acc, acc)
	})
	if !t.vnni {
		VPMADDWD(onesW, acc, acc)
		s := t.vec()
		VPMADDWD(bs, k.ones16, s.AsY())
		VPSUBD(s, acc, acc)
	}
	return acc
}

// genTQ2Runs unpacks the TQ2_0 block at w into runs (tqx4.go).
func genTQ2Runs(k *tqk, w Mem, use func(tqRun)) {
	t := k.t
	for c := 0; c < 2; c++ {
		if t.zmm() {
			q, s := ZMM(), ZMM()
			VBROADCASTI64X4(w.Offset(32*c), q)
			VPSRLVQ(tqHalfShift(), q, s)
			for l := 0; l < 4; l += 2 {
				codes := ZMM()
				if l == 0 {
					VPANDD(k.c03z, s, codes)
				} else {
					VPSRLQ(U8(4), s, codes)
					VPANDD(k.c03z, codes, codes)
				}
				use(tqRun{codes, 128*c + 32*l})
			}
			continue
		}
		q := YMM()
		t.mov(w.Offset(32*c), q)
		for l := 0; l < 4; l++ {
			codes := YMM()
			if l == 0 {
				t.and(k.c03, q, codes)
			} else {
				VPSRLW(U8(2*l), q, codes)
				t.and(k.c03, codes, codes)
			}
			use(tqRun{codes, 128*c + 32*l})
		}
	}
}

// tqFold adds the halves of a zmm (a ymm as is), then the 128-bit halves:
// an xmm of int32.
func (t *target) tqFold(v VecVirtual) VecVirtual {
	return t.fold128(t.foldY(v))
}

// unpackSum is pairSum (c = false) or quadSum (c = true) at full width.
func (t *target) unpackSum(a, b VecVirtual, quad bool) VecVirtual {
	lo, hi := t.vec(), t.vec()
	if quad {
		VPUNPCKLQDQ(b, a, lo)
		VPUNPCKHQDQ(b, a, hi)
	} else {
		VPUNPCKLDQ(b, a, lo)
		VPUNPCKHDQ(b, a, hi)
	}
	VPADDD(hi, lo, lo)
	return lo
}

// genTQ2B4 emits tqb4DotTQ2_0<suffix>.
func genTQ2B4(t *target) {
	fn := "tqb4DotTQ2_0" + t.suffix
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k := &tqk{t: t, c03: YMM(), ones16: YMM()}
	VPBROADCASTD(constU32(0x03030303), k.c03)
	VPBROADCASTD(constU32(0x00010001), k.ones16)
	onesW := k.ones16
	if t.zmm() {
		k.c03z = ZMM()
		VPBROADCASTD(constU32(0x03030303), k.c03z)
		if !t.vnni {
			onesW = ZMM()
			VPBROADCASTD(constU32(0x00010001), onesW)
		}
	}
	var neg VecVirtual
	if t.vnni {
		neg = YMM()
		VPBROADCASTD(constU32(0xffffffff), neg)
	}
	sum := XMM()
	VXORPS(sum, sum, sum)
	CMPQ(nb, U8(4))
	JB(LabelRef("tail" + fn))

	Label("loop" + fn)
	var acc [4]VecVirtual
	for b := range acc {
		acc[b] = k.tqb4Block(wp, ap, b, neg, onesW)
	}
	f := t.tqFold(t.unpackSum(t.unpackSum(acc[0], acc[1], false), t.unpackSum(acc[2], acc[3], false), true))
	VCVTDQ2PS(f, f)
	d, d8 := XMM(), XMM()
	VPBROADCASTW(Mem{Base: wp, Disp: 64}, d)
	VMOVSS(Mem{Base: ap}, d8)
	for b := 1; b < 4; b++ {
		VPINSRW(U8(b), Mem{Base: wp, Disp: b*tq2Size + 64}, d, d)
		VINSERTPS(U8(b<<4), Mem{Base: ap, Disp: b * q8KSize}, d8, d8)
	}
	VCVTPH2PS(d, d)
	VMULPS(d8, d, d) // d*d8 of each block, as tq.go's VMULSS
	VMULPS(d, f, f)
	// sumf += the four in block order.
	h := XMM()
	VADDSS(f, sum, sum)
	VMOVSHDUP(f, h)
	VADDSS(h, sum, sum)
	VMOVHLPS(f, f, h)
	VADDSS(h, sum, sum)
	VPSHUFD(U8(0xff), f, h)
	VADDSS(h, sum, sum)
	ADDQ(U32(4*tq2Size), wp)
	ADDQ(U32(4*q8KSize), ap)
	SUBQ(U8(4), nb)
	CMPQ(nb, U8(4))
	JAE(LabelRef("loop" + fn))

	Label("tail" + fn)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("one" + fn)
	x := t.tqFold(k.tqb4Block(wp, ap, 0, neg, onesW))
	r := XMM()
	VPSHUFD(U8(0x4e), x, r)
	VPADDD(r, x, x)
	VPSHUFD(U8(0xb1), x, r)
	VPADDD(r, x, x)
	VCVTDQ2PS(x, x)
	d1 := XMM()
	VPBROADCASTW(Mem{Base: wp, Disp: 64}, d1)
	VCVTPH2PS(d1, d1)
	VMULSS(Mem{Base: ap}, d1, d1)
	VMULSS(d1, x, x)
	VADDSS(x, sum, sum)
	ADDQ(U32(tq2Size), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("one" + fn))
	Label("done" + fn)
	Store(sum, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
