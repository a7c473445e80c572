package main

import (
	"fmt"

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
// Σw² (with the prepared row's Σa², Cauchy-Schwarz bounds Σ|products|).
// Where the proof fails (a result near a float32 rounding boundary, or
// Inf/NaN) the Go side runs the reference.
//
// The activation row comes prepared (kernelkit/exactfloat.go): float64 for
// F16 and BF16, whose products are exact in float64, so one VFMADD231PD of
// the widened weight and the prepared activation adds exactly the
// reference's product (a half times a half has 22 significant bits, a bf16
// times a bf16 16; float32 holds them too, but for bf16 underflow, which
// the Go side's bound covers); float32 for F32, whose products the
// reference rounds to float32 first (VMULPS, then widen and add).
//
// floatChunk elements make a chunk: their float64 products are summed in
// accumulators and a short tree (no product goes through more than
// kernelkit's floatTree = 12 roundings), and the chunk sum goes into the
// running total T, whose |T| after each chunk is summed into prefix. The
// chunk length is what the bound grows with (kernelkit's floatChunk must
// match).
const (
	floatChunk = 128
	floatTree  = 12
)

// floatScale is the power of two the int widening scales by (2^-896: see
// widen); prepared F16 and BF16 rows hold a·2^896 (kernelkit/exactfloat.go).
const floatScale = 896

// floatRows is how many weight rows one call of a plain float kernel
// takes: they share every load of the activation row, which for F16 and
// BF16 is 8 bytes an element and no longer stays in L1 next to the
// streaming weights (4096 elements: 32 KB). AVX2's 16 registers hold one
// row's accumulators.
func (t *target) floatRows() int {
	if t.evex() {
		return 4
	}
	return 1
}

// genExactFloat emits dot<kind><suffix>(w *byte, wstride int, a *byte,
// n int, out *float64): floatRows() weight rows, wstride bytes apart, of n
// elements (a multiple of floatChunk) times the prepared row a; row r's
// sum, prefix and w2 go to out[3r:3r+3].
func genExactFloat(t *target, kind string) {
	name := "dot" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(w *byte, wstride int, a *byte, n int, out *float64)")
	Pragma("noescape")
	R := t.floatRows()
	rs := newRowStreams(R)
	wps, prefetch := rs.wps, rs.prefetch
	ap := Load(Param("a"), GP64())
	n := Load(Param("n"), GP64())
	out := Load(Param("out"), GP64())
	lanes := t.w / 4 // float32 lanes
	esize, asize := 4, 4
	if kind != "F32" {
		esize, asize = 2, 8
	}
	// Enough independent float64 chains to cover the adds' latency.
	nacc := 4
	switch {
	case t.zmm() && R > 1:
		nacc = 2 // with four rows, eight chains
	case !t.zmm() && !t.evex():
		nacc = 6 // AVX2's 16 registers
	}
	perAcc := (floatChunk/(t.w/8) + nacc - 1) / nacc
	if depth := perAcc - 1 + log2ceil(nacc) + log2ceil(t.w/8); depth > floatTree {
		panic(fmt.Sprintf("%s: a product goes through %d roundings", name, depth))
	}
	// The f32 -> f64 conversion (VCVTPS2PD, VCVTPH2PS too) runs on few
	// units of Zen 4 at about one 256-bit result a cycle: it was the
	// kernels' bottleneck. With AVX-512 (VPSRAQ) they widen with integer
	// ops instead: the bits of an f32 x, shifted down 3 with its sign
	// copied, and the copies and the neighbour's bits masked off, are an
	// f64 x·2^-896 (exact, subnormals included; an Inf or NaN widens to a
	// finite value, but then w2 or the product is not finite and the Go
	// side runs the reference). The even float32 lanes come out in one
	// vector, the odd ones in another: the prepared rows are in that order
	// (in every 16 elements the 8 even ones, then the 8 odd ones), and the
	// AVX2 kernels permute their float32 lanes to match before converting.
	intWiden := t.evex()
	var widenMask, perm VecVirtual
	if intWiden {
		widenMask = t.vec()
		VPBROADCASTQ(constData("widenmask", []byte{0, 0, 0, 0xe0, 0xff, 0xff, 0xff, 0x8f}), widenMask)
	} else if kind != "F32" {
		perm = t.vec()
		VMOVDQU(constData("evenodd32", []byte{0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0,
			1, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0}), perm)
	}
	widen := func(v VecVirtual) [2]VecVirtual {
		if intWiden {
			even, odd := t.vec(), t.vec()
			VPSLLQ(U8(32), v, even)
			VPSRAQ(U8(3), even, even)
			VPANDQ(widenMask, even, even)
			VPSRAQ(U8(3), v, odd)
			VPANDQ(widenMask, odd, odd)
			return [2]VecVirtual{even, odd}
		}
		if perm != nil {
			q := t.vec()
			VPERMPS(v, perm, q)
			v = q
		}
		lo, hi := t.vec(), t.vec()
		VCVTPS2PD(t.lowHalf(v), lo)
		VCVTPS2PD(t.highHalf(v), hi)
		return [2]VecVirtual{lo, hi}
	}
	// The chunk sums' scale: F32's int-widened products are x·2^-896,
	// the AVX2 F16/BF16 products (w times the prepared a·2^896) x·2^896.
	// Scaling back once per chunk is exact: the scaling commutes with the
	// rounding of every add, and adds of subnormals are exact.
	var scale Mem
	switch {
	case kind == "F32" && intWiden:
		scale = constData("f64pow896", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x77})
	case kind != "F32" && !intWiden:
		scale = constData("f64powm896", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x07})
	}
	var hiMask Op
	if kind == "BF16" {
		hiMask = t.konstMem(0xffff0000)
	}
	// Per row: the w2 lanes, and sum and prefix in out (one update a
	// chunk). One row keeps two w2 chains.
	nw2 := max(1, 2/R)
	w2acc := make([][]VecVirtual, R)
	zero := XMM()
	t.zero(zero)
	for r := range w2acc {
		for k := 0; k < nw2; k++ {
			v := t.vec()
			t.zero(v)
			w2acc[r] = append(w2acc[r], v)
		}
		VMOVSD(zero, Mem{Base: out, Disp: 24 * r})
		VMOVSD(zero, Mem{Base: out, Disp: 24*r + 8})
	}
	abs64 := constData("absf64x2", []byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})

	SHRQ(U8(7), n) // chunks
	JZ(LabelRef("done" + name))
	Label("loop" + name)

	accs := make([]*accSet, R)
	sq := make([]int, R)
	for r := range accs {
		accs[r] = &accSet{regs: make([]VecVirtual, nacc)}
	}
	square := func(r int, w VecVirtual) {
		VFMADD231PS(w, w, w2acc[r][sq[r]%nw2])
		sq[r]++
	}
	// fma adds, for each row r, the products of its float32 weights
	// (get(r)) and the prepared activations of their even lanes at even,
	// of their odd lanes at odd (loaded once for all rows).
	fma := func(get func(r int) VecVirtual, even, odd int) {
		ae, ao := t.vec(), t.vec()
		VMOVUPD(Mem{Base: ap, Disp: even}, ae)
		VMOVUPD(Mem{Base: ap, Disp: odd}, ao)
		for r := 0; r < R; r++ {
			w := get(r)
			square(r, w)
			d := widen(w)
			accs[r].fma(d[0], ae)
			accs[r].fma(d[1], ao)
		}
	}
	switch kind {
	case "F32":
		for k := 0; k < floatChunk/lanes; k++ {
			a := t.vec()
			VMOVUPS(Mem{Base: ap, Disp: k * t.w}, a)
			for r := 0; r < R; r++ {
				prefetch(r, k*t.w)
				w, p := t.vec(), t.vec()
				VMOVUPS(Mem{Base: wps[r], Disp: k * t.w}, w)
				VMULPS(a, w, p)
				square(r, w)
				for _, d := range widen(p) {
					accs[r].add(d)
				}
			}
		}
	case "F16":
		for k := 0; k < floatChunk/lanes; k++ {
			elem := k * lanes
			at := elem/16*128 + elem%16/8*32
			fma(func(r int) VecVirtual {
				prefetch(r, k*lanes*2)
				w := t.vec()
				VCVTPH2PS(Mem{Base: wps[r], Disp: k * lanes * 2}, w)
				return w
			}, at, at+64)
		}
	case "BF16":
		// A bf16 is the top half of a float32: a dword's high half is one
		// once the low half is masked off (the odd elements), its low half
		// becomes one shifted up (the even ones). Widened, those split
		// again: the prepared row holds each 32 elements' activations as
		// the 8 with index 0 mod 4, then 2, 1 and 3 mod 4.
		for k := 0; k < floatChunk/(2*lanes); k++ {
			elem := k * 2 * lanes
			at := elem/32*256 + elem%32/16*32
			fma(func(r int) VecVirtual {
				prefetch(r, k*t.w)
				e := t.vec()
				VPSLLD(U8(16), Mem{Base: wps[r], Disp: k * t.w}, e)
				return e
			}, at, at+64)
			fma(func(r int) VecVirtual {
				o, m := t.vec(), Mem{Base: wps[r], Disp: k * t.w}
				if t.evex() {
					t.and(m, hiMask, o)
				} else {
					VMOVDQU(m, o)
					t.and(hiMask, o, o)
				}
				return o
			}, at+128, at+192)
		}
	default:
		panic("genExactFloat: " + kind)
	}
	for r := 0; r < R; r++ {
		cs := t.hsum64(accs[r].reduce())
		if scale != (Mem{}) {
			VMULSD(scale, cs, cs)
		}
		sum, pre := Mem{Base: out, Disp: 24 * r}, Mem{Base: out, Disp: 24*r + 8}
		VADDSD(sum, cs, cs)
		VMOVSD(cs, sum)
		t.and(abs64, cs, cs)
		VADDSD(pre, cs, cs)
		VMOVSD(cs, pre)
		ADDQ(U32(floatChunk*esize), wps[r])
	}
	ADDQ(U32(floatChunk*asize), ap)
	DECQ(n)
	JNZ(LabelRef("loop" + name))

	Label("done" + name)
	for r := 0; r < R; r++ {
		v := w2acc[r][0]
		for _, x := range w2acc[r][1:] {
			VADDPS(x, v, v)
		}
		s := t.hsum(v)
		VCVTSS2SD(s, s, s)
		VMOVSD(s, Mem{Base: out, Disp: 24*r + 16})
	}
	VZEROUPPER()
	RET()
}

func log2ceil(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
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

// accSet is a chunk's float64 accumulators, used round robin: add puts a
// vector into the next one, fma the product of a vector and a memory
// operand (exact where the kernels use it, so one rounding of acc + x·m, as
// the add of the exact product); the first use of each sets it.
type accSet struct {
	regs []VecVirtual
	n    int
}

func (s *accSet) add(x VecVirtual) {
	k := s.n % len(s.regs)
	if s.n < len(s.regs) {
		s.regs[k] = x
	} else {
		VADDPD(x, s.regs[k], s.regs[k])
	}
	s.n++
}

func (s *accSet) fma(x VecVirtual, m Op) {
	k := s.n % len(s.regs)
	if s.n < len(s.regs) {
		VMULPD(m, x, x)
		s.regs[k] = x
	} else {
		VFMADD231PD(m, x, s.regs[k])
	}
	s.n++
}

// reduce adds the accumulators pairwise into one: ceil(log2(len)) levels.
func (s *accSet) reduce() VecVirtual {
	r := s.regs[:min(s.n, len(s.regs))]
	for len(r) > 1 {
		h := (len(r) + 1) / 2
		for k := 0; k+h < len(r); k++ {
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

// rowStreams are the R weight rows a plain float kernel reads side by
// side (Params w and wstride): their pointers, the row stride and, for
// R > 1, the group stride (R rows). Four rows are four short streams (a
// row of 4096 F16 elements is two pages), which the hardware prefetchers
// learn too late, so each row prefetches, into L2, the same line of the
// row one group of rows on (prefetch). Measured on Zen 4, 1 thread, 4096
// columns: F32 17 -> 30 GB/s, F16 12 -> 15.5 (1024 columns: F16 7 -> 13).
type rowStreams struct {
	wps             []Register
	stride, gstride Register
}

func newRowStreams(R int) *rowStreams {
	s := &rowStreams{wps: []Register{Load(Param("w"), GP64())}, stride: Load(Param("wstride"), GP64())}
	for r := 1; r < R; r++ {
		s.wps = append(s.wps, GP64())
	}
	s.reset(s.wps[0])
	if R > 1 {
		s.gstride = GP64()
		MOVQ(s.stride, s.gstride)
		SHLQ(U8(log2ceil(R)), s.gstride)
	}
	return s
}

// nextGroup moves base on by R rows and points the rows there.
func (s *rowStreams) nextGroup(base Register) {
	if s.gstride != nil {
		ADDQ(s.gstride, base)
	} else {
		ADDQ(s.stride, base)
	}
	s.reset(base)
}

// reset points the rows at base, base+stride, ...
func (s *rowStreams) reset(base Register) {
	if base != s.wps[0] {
		MOVQ(base, s.wps[0])
	}
	for r := 1; r < len(s.wps); r++ {
		LEAQ(Mem{Base: s.wps[r-1], Index: s.stride, Scale: 1}, s.wps[r])
	}
}

// prefetch fetches into L2 the line at off of row r one group on (only
// for R > 1: one row is a stream the hardware prefetchers follow).
func (s *rowStreams) prefetch(r, off int) {
	if len(s.wps) > 1 && off%64 == 0 {
		PREFETCHT1(Mem{Base: s.wps[r], Index: s.gstride, Scale: 1, Disp: off})
	}
}
