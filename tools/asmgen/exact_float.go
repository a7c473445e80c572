package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The plain float dot products, exact. The reference rounds every product
// to float32 and adds them one after another in float64; a sequential
// float64 chain is latency-bound, so these kernels add in a different order
// and return what the Go side (kernelkit's exactfloat.go) needs to prove
// that the order does not change the float32 result: the float64 sum, an
// upper bound on the sum of the |running totals| at chunk boundaries, and
// the sum of |products|. Where the proof fails (a result near a float32
// rounding boundary, or Inf/NaN) the Go side runs the reference.
//
// floatChunk elements make a chunk: their float64 products are summed in a
// short tree (no product goes through more than 11 adds: kernelkit's
// floatTree), and the chunk sum goes into the running total T, whose |T|
// after each chunk is summed into prefix. The chunk length is what the
// bound grows with (kernelkit's floatChunk must match).
const floatChunk = 128

// genExactFloat emits dot<kind><suffix>(w, a *byte, n int) (sum, prefix,
// abs float64) for n a multiple of floatChunk.
func genExactFloat(t *target, kind string) {
	name := "dot" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(w, a *byte, n int) (sum, prefix, abs float64)")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	n := Load(Param("n"), GP64())
	lanes := t.w / 4 // float32 lanes
	esize := 4
	if kind != "F32" {
		esize = 2
	}
	absMask := t.konstMem(0x7fffffff)
	var hiMask Op
	if kind == "BF16" {
		hiMask = t.konstMem(0xffff0000)
	}
	// Four |p| accumulators: fewer float32 add chains per chunk would be
	// longer than the chunk's other work.
	absAcc := [4]VecVirtual{t.vec(), t.vec(), t.vec(), t.vec()}
	for _, v := range absAcc {
		t.zero(v)
	}
	// The f32 -> f64 conversion (VCVTPS2PD, plus a lane extract) is the
	// slowest part on Zen 4: it shares a unit with the float adds and takes
	// about 1.5 cycles a ymm. With AVX-512 (VPSRAQ) the kernels widen with
	// integer ops instead: the bits of an f32 x, shifted down 3 with its
	// sign copied, and the copies and the neighbour's bits masked off, are
	// an f64 x·2^-896 (exact, subnormals included). An Inf or NaN product would widen to a finite value,
	// but then abs is not finite and the Go side runs the reference.
	intWiden := t.evex()
	var scale, widenMask VecVirtual
	var one VecVirtual
	if intWiden {
		scale, widenMask = t.vec(), t.vec()
		VBROADCASTSD(constData("f64pow896", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x77}), scale)
		VPBROADCASTQ(constData("widenmask", []byte{0, 0, 0, 0xe0, 0xff, 0xff, 0xff, 0x8f}), widenMask)
	} else {
		// The accumulating adds go to the FMA units (see accSet): the
		// conversions keep the add units busy.
		one = t.vec()
		VBROADCASTSD(constData("onef64", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}), one)
	}
	// AVX2 has 16 registers: its float32 constants stay in memory.
	one32 := t.konstMem(0x3f800000)
	total, prefix := XMM(), XMM()
	t.zero(total)
	t.zero(prefix)
	abs64 := constData("absf64x2", []byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})

	SHRQ(U8(7), n) // chunks
	JZ(LabelRef("done" + name))
	Label("loop" + name)

	nv := floatChunk / lanes // product vectors per chunk
	// Every float64 vector of the chunk goes into one of a few
	// accumulators (the first into each sets it): the integer-widened
	// values, all scaled by 2^-896, into scaled (scaled back once per
	// chunk: the scaling commutes with the rounding of every add, and adds
	// of subnormals are exact), the converted ones into plain.
	scaled, plain := &accSet{regs: make([]VecVirtual, 4)}, &accSet{regs: make([]VecVirtual, 4)}
	if !intWiden {
		plain.one = one
	}
	i := 0
	add := func(p VecVirtual) {
		q := t.vec()
		t.and(absMask, p, q)
		VFMADD231PS(one32, q, absAcc[i%4])
		i++
		if intWiden {
			odd := t.vec()
			VPSRAQ(U8(3), p, odd)
			VPANDQ(widenMask, odd, odd)
			scaled.add(odd)
			even := t.vec()
			VPSLLQ(U8(32), p, even)
			VPSRAQ(U8(3), even, even)
			VPANDQ(widenMask, even, even)
			scaled.add(even)
			return
		}
		d0, d1 := t.vec(), t.vec()
		VCVTPS2PD(t.lowHalf(p), d0)
		VCVTPS2PD(t.highHalf(p), d1)
		VADDPD(d1, d0, d0)
		plain.add(d0)
	}
	switch kind {
	case "F32":
		for k := 0; k < nv; k++ {
			p := t.vec()
			VMOVUPS(Mem{Base: wp, Disp: k * t.w}, p)
			VMULPS(Mem{Base: ap, Disp: k * t.w}, p, p)
			add(p)
		}
	case "F16":
		for k := 0; k < nv; k++ {
			p, u := t.vec(), t.vec()
			VCVTPH2PS(Mem{Base: wp, Disp: k * t.w / 2}, p)
			VCVTPH2PS(Mem{Base: ap, Disp: k * t.w / 2}, u)
			VMULPS(u, p, p)
			add(p)
		}
	case "BF16":
		// A bf16 is the top half of a float32: a dword's high half is one
		// once the low half is masked off, its low half becomes one shifted
		// up. This pairs the same elements of w and a, in another order,
		// which the sum's bound does not care about.
		for k := 0; k < nv/2; k++ {
			w, a := t.vec(), t.vec()
			VMOVUPS(Mem{Base: wp, Disp: k * t.w}, w)
			VMOVUPS(Mem{Base: ap, Disp: k * t.w}, a)
			we, ae := t.vec(), t.vec()
			VPSLLD(U8(16), w, we)
			VPSLLD(U8(16), a, ae)
			VMULPS(ae, we, we)
			add(we)
			t.and(hiMask, w, w)
			t.and(hiMask, a, a)
			VMULPS(a, w, w)
			add(w)
		}
	default:
		panic("genExactFloat: " + kind)
	}
	var sum VecVirtual
	switch {
	case scaled.n > 0 && plain.n > 0:
		sum = plain.reduce()
		VFMADD231PD(scale, scaled.reduce(), sum)
	case scaled.n > 0:
		sum = scaled.reduce()
		VMULPD(scale, sum, sum)
	default:
		sum = plain.reduce()
	}
	cs := t.hsum64(sum)
	VADDSD(cs, total, total)
	at := XMM()
	t.and(abs64, total, at)
	VADDSD(at, prefix, prefix)

	ADDQ(U32(floatChunk*esize), wp)
	ADDQ(U32(floatChunk*esize), ap)
	DECQ(n)
	JNZ(LabelRef("loop" + name))

	Label("done" + name)
	VADDPS(absAcc[1], absAcc[0], absAcc[0])
	VADDPS(absAcc[3], absAcc[2], absAcc[2])
	VADDPS(absAcc[2], absAcc[0], absAcc[0])
	s := t.hsum(absAcc[0])
	VCVTSS2SD(s, s, s)
	// Before Store's legacy-SSE MOVSDs, which stall on a dirty upper state.
	VZEROUPPER()
	Store(total, Return("sum"))
	Store(prefix, Return("prefix"))
	Store(s, Return("abs"))
	RET()
}

// lowHalf is the low half of a full-width register (the float32 lanes
// VCVTPS2PD widens into a full-width register of float64).
func (t *target) lowHalf(v VecVirtual) Register {
	if t.zmm() {
		return v.AsY()
	}
	return v.AsX()
}

// highHalf extracts the high half of a full-width register.
func (t *target) highHalf(v VecVirtual) Register {
	switch {
	case t.zmm():
		h := YMM()
		VEXTRACTF64X4(U8(1), v, h)
		return h
	case t.evex():
		h := XMM()
		VEXTRACTF32X4(U8(1), v, h)
		return h
	default:
		h := XMM()
		VEXTRACTF128(U8(1), v, h)
		return h
	}
}

// hsum64 adds the float64 lanes of v into the low lane of an xmm.
func (t *target) hsum64(v VecVirtual) VecVirtual {
	y := v
	if t.zmm() {
		y = YMM()
		VEXTRACTF64X4(U8(1), v, y)
		VADDPD(y, v.AsY(), y)
	}
	x := XMM()
	if t.evex() {
		VEXTRACTF32X4(U8(1), y, x)
	} else {
		VEXTRACTF128(U8(1), y, x)
	}
	VADDPD(x, y.AsX(), x)
	h := XMM()
	VUNPCKHPD(x, x, h)
	VADDSD(h, x, x)
	return x
}

// konstMem is a splat of v: a register with AVX-512, a 32-byte memory
// operand with AVX2, whose 16 registers the accumulators fill.
func (t *target) konstMem(v uint32) Op {
	if t.evex() {
		return t.splat(v)
	}
	return constVec(v)
}

// accSet is a chunk's float64 accumulators: add puts a vector into the
// next one, setting it on its first use; with one, the adds run on the FMA
// units as multiply-adds by 1.0 (exact: one rounding of acc + x).
type accSet struct {
	regs []VecVirtual
	one  VecVirtual
	n    int
}

func (s *accSet) add(x VecVirtual) {
	k := s.n % len(s.regs)
	switch {
	case s.n < len(s.regs):
		s.regs[k] = x
	case s.one != nil:
		VFMADD231PD(s.one, x, s.regs[k])
	default:
		VADDPD(x, s.regs[k], s.regs[k])
	}
	s.n++
}

// reduce adds the accumulators pairwise into one.
func (s *accSet) reduce() VecVirtual {
	r := s.regs[:min(s.n, len(s.regs))]
	for len(r) > 1 {
		h := len(r) / 2
		for k := 0; k < h; k++ {
			VADDPD(r[k+h], r[k], r[k])
		}
		r = r[:h]
	}
	return r[0]
}

// genSeqFloat emits dotSeq<kind><suffix>(w, a *byte, n int) float64, the
// reference's own sum for n a multiple of 8: the products in element
// order, added one by one to a float64 from +0. It is the fallback where
// the bound cannot decide; the products and their widening run beside
// the chain of adds, which is all that is left of the reference's time.
func genSeqFloat(t *target, kind string) {
	name := "dotSeq" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(w, a *byte, n int) float64")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	n := Load(Param("n"), GP64())
	s := XMM()
	t.zero(s)
	esize := 4
	if kind != "F32" {
		esize = 2
	}
	SHRQ(U8(3), n)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	p := YMM()
	switch kind {
	case "F32":
		VMOVUPS(Mem{Base: wp}, p)
		VMULPS(Mem{Base: ap}, p, p)
	case "F16":
		u := YMM()
		VCVTPH2PS(Mem{Base: wp}, p)
		VCVTPH2PS(Mem{Base: ap}, u)
		VMULPS(u, p, p)
	case "BF16":
		u := YMM()
		VPMOVZXWD(Mem{Base: wp}, p)
		VPMOVZXWD(Mem{Base: ap}, u)
		VPSLLD(U8(16), p, p)
		VPSLLD(U8(16), u, u)
		VMULPS(u, p, p)
	}
	lo, hi := YMM(), YMM()
	VCVTPS2PD(p.AsX(), lo)
	VCVTPS2PD(t.highHalfY(p), hi)
	for _, d := range []VecVirtual{lo, hi} {
		for _, x := range []Register{d.AsX(), t.highHalfY(d)} {
			VADDSD(x, s, s)
			h := XMM()
			VUNPCKHPD(x, x, h)
			VADDSD(h, s, s)
		}
	}
	ADDQ(U32(8*esize), wp)
	ADDQ(U32(8*esize), ap)
	DECQ(n)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER()
	Store(s, ReturnIndex(0))
	RET()
}

// highHalfY extracts the high half of a ymm.
func (t *target) highHalfY(v VecVirtual) Register {
	h := XMM()
	if t.evex() {
		VEXTRACTF32X4(U8(1), v, h)
	} else {
		VEXTRACTF128(U8(1), v, h)
	}
	return h
}
