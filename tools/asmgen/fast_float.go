package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The fast F16 and BF16 dot products: the kernels' float mode "fast"
// (kernelkit/fastfloat.go), opted into where a model's half-precision
// matrices matter more than bit-identity with the reference. They keep
// the exact kernels' products (exact in float32) but add them in float32,
// as ggml's own SIMD code does, only 4 deep: 16 float32 lanes, lane j
// taking one product of each 16 elements, are flushed into 16 float64
// lanes every 64 elements. The order is fixed — the same on every level
// and in kernelkit's Go reference (fastFloatRef), bit for bit:
//
//   - F16: in each 64 elements, lane j takes elements j, 16+j, 32+j, 48+j
//     (VCVTPH2PS order);
//   - BF16: in each 64, lane j takes elements 2j, 2j+1, 32+2j, 33+2j (a
//     dword holds an even and an odd element: shifted up 16 and masked,
//     they are float32s); the prepared row holds each 32 elements'
//     activations as the 16 even ones, then the 16 odd ones;
//   - each product is added with one float32 rounding (an FMA: the first
//     of the 64 is the product itself), the lane then added into its
//     float64 lane D[j] (from +0);
//   - the 16 float64 lanes are summed by halves: D[j]+D[j+8], then +4,
//     +2, +1 (hsum64's tree on 8 lanes after one add of the halves).
//
// Error against the reference: three float32 roundings a lane per 64
// elements, each at most 2^-24 of that lane's Σ|products| (kernelkit's
// tests bound |fast - exact| by 2^-21·Σ|p| + the final rounding).
const fastChunk = 64

// genFastFloat emits dotFast<kind><suffix>(w *byte, wstride int, a *byte,
// n int, out *float64): floatRows() weight rows, wstride bytes apart, of
// n elements (a multiple of fastChunk) times the prepared float32 row a;
// row r's float64 sum to out[r].
func genFastFloat(t *target, kind string) {
	name := "dotFast" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(w *byte, wstride int, a *byte, n int, out *float64)")
	Pragma("noescape")
	R := t.floatRows()
	wps, prefetch := floatRowStreams(R)
	ap := Load(Param("a"), GP64())
	n := Load(Param("n"), GP64())
	out := Load(Param("out"), GP64())
	lanes := t.w / 4 // float32 lanes a register
	nv := 16 / lanes // registers of the 16 float32 lanes
	nd := 2 * nv     // registers of the 16 float64 lanes
	L := make([][]VecVirtual, R)
	D := make([][]VecVirtual, R)
	for r := range R {
		for range nv {
			L[r] = append(L[r], t.vec())
		}
		for range nd {
			v := t.vec()
			t.zero(v)
			D[r] = append(D[r], v)
		}
	}
	var hiMask Op
	if kind == "BF16" {
		hiMask = t.konstMem(0xffff0000)
	}
	SHRQ(U8(6), n) // chunks
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	// step adds the products of the weights get(r, h) yields and the
	// activations at a+aoff+h·t.w into lane set h of every row.
	first := true
	step := func(get func(r, h int) VecVirtual, aoff int) {
		for h := range nv {
			am := Mem{Base: ap, Disp: aoff + h*t.w}
			for r := range R {
				w := get(r, h)
				if first {
					VMULPS(am, w, L[r][h])
				} else {
					VFMADD231PS(am, w, L[r][h])
				}
			}
		}
		first = false
	}
	switch kind {
	case "F16":
		for s := range 4 {
			step(func(r, h int) VecVirtual {
				off := 2 * (16*s + h*lanes)
				prefetch(r, off)
				w := t.vec()
				VCVTPH2PS(Mem{Base: wps[r], Disp: off}, w)
				return w
			}, 4*16*s)
		}
	case "BF16":
		// A register's dwords hold elements 32g + 2(h·lanes+j) and the
		// next: shifted up 16, the even one is a float32, masked, the odd
		// one. Both go into the lane, even first.
		for g := range 2 {
			for h := range nv {
				ae := Mem{Base: ap, Disp: 4*32*g + h*t.w}
				ao := Mem{Base: ap, Disp: 4*(32*g+16) + h*t.w}
				for r := range R {
					off := 2 * (32*g + 2*h*lanes)
					prefetch(r, off)
					d, e := t.vec(), t.vec()
					t.mov(Mem{Base: wps[r], Disp: off}, d)
					VPSLLD(U8(16), d, e)
					if g == 0 {
						VMULPS(ae, e, L[r][h])
					} else {
						VFMADD231PS(ae, e, L[r][h])
					}
					t.and(hiMask, d, d)
					VFMADD231PS(ao, d, L[r][h])
				}
			}
		}
	default:
		panic("genFastFloat: " + kind)
	}
	// Flush: D[2h] gets the low half of lane set h widened, D[2h+1] the
	// high half.
	for r := range R {
		for h := range nv {
			lo, hi := t.vec(), t.vec()
			VCVTPS2PD(t.lowHalf(L[r][h]), lo)
			VCVTPS2PD(t.highHalf(L[r][h]), hi)
			VADDPD(lo, D[r][2*h], D[r][2*h])
			VADDPD(hi, D[r][2*h+1], D[r][2*h+1])
		}
		ADDQ(U32(fastChunk*2), wps[r])
	}
	ADDQ(U32(fastChunk*4), ap)
	DECQ(n)
	JNZ(LabelRef("loop" + name))

	Label("done" + name)
	for r := range R {
		// D[j] + D[j+8]: the first half's registers plus the second's.
		d := D[r]
		for k := 0; k < nd/2; k++ {
			VADDPD(d[k+nd/2], d[k], d[k])
		}
		var v VecVirtual
		switch nd / 2 {
		case 1: // zmm: 8 lanes left
			v = d[0]
		case 2: // ymm: lanes 0-3 in d[0], 4-7 in d[1]; +4 is d[0]+d[1]
			VADDPD(d[1], d[0], d[0])
			v = d[0]
		}
		var x VecVirtual
		if t.zmm() {
			x = t.hsum64(v)
		} else {
			// four lanes: +2, then +1
			x = XMM()
			if t.evex() {
				VEXTRACTF32X4(U8(1), v, x)
			} else {
				VEXTRACTF128(U8(1), v, x)
			}
			VADDPD(x, v.AsX(), x)
			h := XMM()
			VUNPCKHPD(x, x, h)
			VADDSD(h, x, x)
		}
		VMOVSD(x, Mem{Base: out, Disp: 8 * r})
	}
	VZEROUPPER()
	RET()
}

// genFastPrep emits prepFast<kind><suffix>(src *byte, dst *byte, n int):
// the first n activations (n a multiple of fastChunk) of an F16 or BF16
// row as the float32s the fast kernels read (kernelkit's fastPrep.rows:
// F16 in order, BF16 each 32 elements' 16 even ones, then the 16 odd).
func genFastPrep(t *target, kind string) {
	name := "prepFast" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(src *byte, dst *byte, n int)")
	Pragma("noescape")
	sp := Load(Param("src"), GP64())
	dp := Load(Param("dst"), GP64())
	n := Load(Param("n"), GP64())
	lanes := t.w / 4
	var hiMask Op
	if kind == "BF16" {
		hiMask = t.konstMem(0xffff0000)
	}
	SHRQ(U8(6), n)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	switch kind {
	case "F16":
		for i := 0; i < fastChunk; i += lanes {
			v := t.vec()
			VCVTPH2PS(Mem{Base: sp, Disp: 2 * i}, v)
			VMOVUPS(v, Mem{Base: dp, Disp: 4 * i})
		}
	case "BF16":
		for g := range 2 {
			for h := range 16 / lanes {
				d, e := t.vec(), t.vec()
				t.mov(Mem{Base: sp, Disp: 2 * (32*g + 2*h*lanes)}, d)
				VPSLLD(U8(16), d, e)
				t.and(hiMask, d, d)
				VMOVUPS(e, Mem{Base: dp, Disp: 4*32*g + h*t.w})
				VMOVUPS(d, Mem{Base: dp, Disp: 4*(32*g+16) + h*t.w})
			}
		}
	default:
		panic("genFastPrep: " + kind)
	}
	ADDQ(U32(2*fastChunk), sp)
	ADDQ(U32(4*fastChunk), dp)
	DECQ(n)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER()
	RET()
}
