package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// TQ2_0 and TQ1_0 · Q8_K, bit for bit ggml_vec_dot_tq2_0_q8_K_generic and
// ggml_vec_dot_tq1_0_q8_K_generic (core/quant vecDotTQ2, vecDotTQ1). The
// reference adds one float term per super-block, float(sumi)*(d8*d), so
// the float part is a short scalar chain and everything else is integers:
// sumi = sum(a*(t-1)) = sum(a*t) - sum(a), with the trits t in 0..2 as
// unsigned bytes against the signed activations (VPDPBUSD, or VPMADDUBSW
// whose pair sums stay far inside int16), and sum(a) from the Q8_K
// block's bsums (exact int16 sums of its quants, as every Q8_K the
// quantizer makes has them).
//
// TQ1_0 packs five trits per byte as a base-3 fraction: trit n of byte b is
// ((b*3^n) mod 256)*3 >> 8. Bytes are multiplied in 16-bit lanes, the even
// bytes as they are (a product's low byte depends only on the low byte),
// the odd ones with the even byte cleared; VPMULHUW by 3 of each product
// moved into the high byte gives the trit.

const (
	tq1Size = 54
	tq2Size = 66
)

// tqk holds a TQ kernel's constants and its accumulators: int16 pair
// sums (AVX2) or int32 (VNNI), a ymm and, for TQ1_0's 16-byte parts, an
// xmm of its own (a 128-bit op would clear the ymm's upper half).
type tqk struct {
	t                  *target
	c03, ones16, three VecVirtual
	c03z               VecVirtual // c03 as a zmm (the 512-bit TQ2_0 kernels)
	hiByte             VecVirtual // 0xff00 in every word (TQ1_0)
	hiByteZ, threeZ    VecVirtual // as zmms (the 512-bit TQ1_0 kernels)
	acc, accX          VecVirtual
}

// dot adds codes (unsigned bytes, at most 3) times the activations at a
// into acc, or with x the 16 of them into accX.
func (k *tqk) dot(codes VecVirtual, a Mem, x bool) {
	av, acc := YMM(), k.acc
	if x {
		av, acc = XMM(), k.accX
	}
	k.t.mov(a, av)
	if k.t.vnni {
		vnniOp("VPDPBUSD", av, codes, acc)
		return
	}
	VPMADDUBSW(av, codes, av)
	VPADDW(av, acc, acc)
}

// finish turns acc (plus accX where used) minus the block's bsums at bs
// into sumi, as a float in the low lane of the returned xmm.
func (k *tqk) finish(bs Mem) VecVirtual {
	t := k.t
	s := k.acc
	if !t.vnni {
		VPMADDWD(k.ones16, s, s)
		if k.accX != nil {
			VPMADDWD(k.ones16.AsX(), k.accX, k.accX)
		}
	}
	b := YMM()
	t.mov(bs, b)
	VPMADDWD(k.ones16, b, b)
	VPSUBD(b, s, s)
	x := XMM()
	VPADDD(t.highHalfY(s), s.AsX(), x)
	if k.accX != nil {
		VPADDD(k.accX, x, x)
	}
	r := XMM()
	VPSHUFD(U8(0x4e), x, r)
	VPADDD(r, x, x)
	VPSHUFD(U8(0xb1), x, r)
	VPADDD(r, x, x)
	VCVTDQ2PS(x, x)
	return x
}

// tqLoop emits dot<name><suffix>(w, a *byte, nb int) float32 around body,
// which adds one super-block's sum(a*t) into the accumulators. (TQ2_0's
// one-row kernel is tqb4.go's, four blocks at a time; its four-row ones
// and TQ1_0's are tqx4.go's.)
func tqLoop(t *target, name string, wsize, doff int, pre func(k *tqk), body func(k *tqk, w, a Register)) {
	fn := "dot" + name + t.suffix
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb int) float32")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	k := &tqk{t: t, c03: YMM(), ones16: YMM()}
	VPBROADCASTD(constU32(0x03030303), k.c03)
	VPBROADCASTD(constU32(0x00010001), k.ones16)
	pre(k)
	sum := XMM()
	VXORPS(sum, sum, sum)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	k.acc = YMM()
	t.zero(k.acc)
	if k.accX != nil {
		k.accX = XMM()
		t.zero(k.accX)
	}
	body(k, wp, ap)
	f := k.finish(Mem{Base: ap, Disp: 4 + 256})
	d := XMM()
	VPBROADCASTW(Mem{Base: wp, Disp: doff}, d)
	VCVTPH2PS(d, d)
	VMULSS(Mem{Base: ap}, d, d) // d*d8; the reference's d8*d (multiplication commutes)
	VMULSS(d, f, f)
	VADDSS(f, sum, sum)
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	Store(sum, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// trits returns trit n of every byte of q (a ymm or an xmm), mul holding
// the multiplier 3^n of each 16-bit word's two bytes (nil: 1): the even
// bytes through one 16-bit multiply (a product's low byte depends only on
// the low bytes), the odd ones through one of q with the even bytes
// cleared, each product's byte then moved to the top of its word for
// VPMULHUW by 3.
func (k *tqk) trits(q VecVirtual, mul Op, x bool) VecVirtual {
	w := 32
	if x {
		w = 16
	}
	return k.tritsW(q, mul, w)
}

// tritsW is trits on a vector of w bytes (16, 32 or 64).
func (k *tqk) tritsW(q VecVirtual, mul Op, w int) VecVirtual {
	mk := func() VecVirtual {
		switch w {
		case 16:
			return XMM()
		case 64:
			return ZMM()
		}
		return YMM()
	}
	v := func(r VecVirtual) Op {
		switch w {
		case 16:
			return r.AsX()
		case 64:
			return r.AsZ()
		}
		return r.AsY()
	}
	hb, three := k.hiByte, k.three
	if w == 64 {
		hb, three = k.hiByteZ, k.threeZ
	}
	ev, od := mk(), mk()
	if mul == nil {
		VPSLLW(U8(8), q, ev)
	} else {
		VPMULLW(mul, q, ev)
		VPSLLW(U8(8), ev, ev)
	}
	k.t.and(v(hb), q, od)
	if mul != nil {
		VPMULLW(mul, od, od) // the low byte stays 0: no carry into the high one
	}
	VPMULHUW(v(three), ev, ev)
	VPMULHUW(v(three), od, od)
	VPSLLW(U8(8), od, od)
	k.t.or(od, ev, ev)
	return ev
}

// tq1Zmm is the body of the 512-bit TQ1_0 kernels: trits n and n+1 of
// qs[0:32] side by side (their activations are 64 consecutive bytes), the
// four first trits of qs[32:48] in the four 128-bit lanes, then trit 4 of
// qs[32:48] next to the spread qh bytes: five vectors per block where the
// 256-bit kernel has eleven.
func (k *tqk) tq1Zmm(wp, ap Register, spread, qhMul []byte) {
	t := k.t
	acc := ZMM()
	t.zero(acc)
	dot := func(codes VecVirtual, a Mem) {
		av := ZMM()
		VMOVDQU64(a, av)
		if t.vnni {
			vnniOp("VPDPBUSD", av, codes, acc)
			return
		}
		VPMADDUBSW(av, codes, av)
		VPADDW(av, acc, acc)
	}
	words := func(name string, lanes []int, laneBytes int) Mem {
		var b []byte
		for _, p := range lanes {
			for i := 0; i < laneBytes; i += 2 {
				b = append(b, byte(p), 0)
			}
		}
		return constData(name, b)
	}
	q := ZMM()
	VBROADCASTI64X4(Mem{Base: wp}, q)
	dot(k.tritsW(q, words("tq1m01", []int{1, 3}, 32), 64), Mem{Base: ap, Disp: 4})
	dot(k.tritsW(q, words("tq1m23", []int{9, 27}, 32), 64), Mem{Base: ap, Disp: 4 + 64})
	h := ZMM()
	VBROADCASTI32X4(Mem{Base: wp, Disp: 32}, h)
	dot(k.tritsW(h, words("tq1h0123", []int{1, 3, 9, 27}, 16), 64), Mem{Base: ap, Disp: 4 + 160})
	// Trit 4 of qs[0:32], and trit 4 of qs[32:48] beside the qh trits.
	t4 := k.tritsW(q.AsY().(VecVirtual), constVec(81*0x00010001), 32)
	k.dot(t4, Mem{Base: ap, Disp: 4 + 128}, false)
	sp, y := XMM(), YMM()
	VMOVDQU64(Mem{Base: wp, Disp: 38}, sp) // bytes 38..53: the block's last 16
	VPSHUFB(constData("tq1qhspread", spread), sp, sp)
	VINSERTI32X4(U8(1), sp, h.AsY(), y)
	var mb []byte
	for i := 0; i < 16; i += 2 {
		mb = append(mb, 81, 0)
	}
	mb = append(mb, qhMul...)
	k.dot(k.tritsW(y, constData("tq1m4qh", mb), 32), Mem{Base: ap, Disp: 4 + 224}, false)
	hi := YMM()
	VEXTRACTI64X4(U8(1), acc, hi)
	if t.vnni {
		VPADDD(hi, acc.AsY(), hi)
		VPADDD(hi, k.acc, k.acc)
	} else {
		VPADDW(hi, acc.AsY(), hi)
		VPADDW(hi, k.acc, k.acc)
	}
}

// genTQ1 emits dotTQ1_0<suffix>. qs[0:32] hold elements 32n+m (trit n of
// byte m), qs[32:48] elements 160+16n+m, and qh[j] elements 240+4n+j:
// the qh bytes are spread so that byte 4n+j holds qh[j] with multiplier
// 3^n, which puts those sixteen trits in activation order.
func genTQ1(t *target) {
	var spread, qhMul []byte
	for n := 0; n < 4; n++ {
		for j := 0; j < 4; j++ {
			spread = append(spread, byte(10+j)) // loaded from byte 38: qh[j] is byte 10+j
		}
		qhMul = append(qhMul, byte([]int{1, 3, 9, 27}[n]), 0, byte([]int{1, 3, 9, 27}[n]), 0)
	}
	tqLoop(t, "TQ1_0", tq1Size, 52, func(k *tqk) {
		k.hiByte, k.three = YMM(), YMM()
		VPBROADCASTD(constU32(0xff00ff00), k.hiByte)
		VPBROADCASTD(constU32(0x00030003), k.three)
		if t.zmm() {
			k.hiByteZ, k.threeZ = ZMM(), ZMM()
			VPBROADCASTD(constU32(0xff00ff00), k.hiByteZ)
			VPBROADCASTD(constU32(0x00030003), k.threeZ)
			return
		}
		k.accX = XMM() // tqLoop's per-block zeroing takes it from here
	}, func(k *tqk, wp, ap Register) {
		if t.zmm() {
			k.tq1Zmm(wp, ap, spread, qhMul)
			return
		}
		pow3 := []uint32{1, 3, 9, 27, 81}
		// An xmm operand reads the low 16 bytes of the same constant.
		mul := func(n int, _ bool) Op {
			if n == 0 {
				return nil
			}
			return constVec(pow3[n] * 0x00010001)
		}
		q := YMM()
		t.mov(Mem{Base: wp}, q)
		for n := 0; n < 5; n++ {
			k.dot(k.trits(q, mul(n, false), false), Mem{Base: ap, Disp: 4 + 32*n}, false)
		}
		h := XMM()
		t.mov(Mem{Base: wp, Disp: 32}, h)
		for n := 0; n < 5; n++ {
			k.dot(k.trits(h, mul(n, true), true), Mem{Base: ap, Disp: 4 + 160 + 16*n}, true)
		}
		s := XMM()
		t.mov(Mem{Base: wp, Disp: 38}, s) // bytes 38..53: the block's last 16
		VPSHUFB(constData("tq1qhspread", spread), s, s)
		k.dot(k.trits(s, constData("tq1qhmul", qhMul), true), Mem{Base: ap, Disp: 4 + 240}, true)
	})
}
