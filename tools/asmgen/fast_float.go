package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The fast F32, F16 and BF16 dot products: the kernels' float mode "fast"
// (kernelkit/fastfloat.go), opted into where a model's half-precision
// matrices matter more than bit-identity with the reference. They keep
// the exact kernels' products (F16, BF16: exact in float32; F32: the
// first of a lane's four rounded to float32 as the reference's are, the
// other three fused into the lane's add) but add them in float32,
// as ggml's own SIMD code does, only 4 deep: 16 float32 lanes, lane j
// taking one product of each 16 elements, are flushed into 16 float64
// lanes every 64 elements. The order is fixed — the same on every level
// and in kernelkit's Go reference (fastSum), bit for bit:
//
//   - F16 and F32: in each 64 elements, lane j takes elements j, 16+j,
//     32+j, 48+j (VCVTPH2PS order; F32's floats as they lie);
//   - BF16: in each 64, lane j takes elements 2j, 2j+1, 32+2j, 33+2j (a
//     dword holds an even and an odd element: shifted up 16 and masked,
//     they are float32s);
//   - each product is added with one float32 rounding (an FMA: the first
//     of the 64 is the product itself), the lane then added into its
//     float64 lane D[j] (from +0);
//   - the 16 float64 lanes are summed by halves: D[j]+D[j+8], then +4,
//     +2, +1 (hsum64's tree on 8 lanes after one add of the halves).
//
// Error against the reference: three float32 roundings a lane per 64
// elements, each at most 2^-24 of that lane's Σ|products| (F32: those,
// plus the reference's own rounding of each product, which the fused
// adds skip: at most 5·2^-24·Σ|p| to first order; kernelkit's tests bound
// |fast - exact| by 2^-21·Σ|p| + the final rounding).
//
// (Flushing every 128 elements instead runs 15-20% faster from L3 but
// 15-20% slower from DRAM on one Zen 4 thread, 4096 columns: measured.)
const fastChunk = 64

// fastUnroll is how many chunks a fast kernel computes at once: a lane's
// four FMAs are a chain, so one row alone (AVX2: floatRows is 1, its 16
// registers hold one row) needs two chunks in flight to keep the FMA
// units busy; four rows side by side (AVX-512) have chains enough.
func (t *target) fastUnroll() int {
	if t.floatRows() > 1 {
		return 1
	}
	return 2
}

// genFastFloat emits dotFast<kind><suffix>(w *byte, wstride int, a *byte,
// n int, rows int, out *float64): rows weight rows (a multiple of
// floatRows: AVX-512 shares each activation load among four rows; one row
// alone measured 15% slower from L3 and 20% slower with two threads on
// Zen 4), wstride bytes apart, of n elements (a multiple of fastChunk)
// times the activation row a (F32: the float32s; F16: prepared float32s;
// BF16: the bf16s as they are); row r's float64 sum to out[r].
//
// A chunk's 16 float32 lanes depend only on that chunk: the loop computes
// U chunks' lanes at once and then adds them into the float64 lanes in
// chunk order — the same bits as one chunk at a time.
func genFastFloat(t *target, kind string) {
	name := "dotFast" + kind + t.suffix
	TEXT(name, NOSPLIT, "func(w *byte, wstride int, a *byte, n int, rows int, out *float64)")
	Pragma("noescape")
	R, U := t.floatRows(), t.fastUnroll()
	s := newRowStreams(R)
	wps := s.wps
	prefetch := s.prefetch
	switch {
	case R == 1:
		// One row (AVX2): its next lines into L1, four ahead (Zen 4,
		// BF16 one row at a time, 32768×4096: 22-25 GB/s without, 25-29
		// with; 512 bytes and more ahead are slower). The exact kernels'
		// rows, compute-bound, take no prefetch. F32 (twice the bytes an
		// element): 2048 bytes ahead (Sapphire Rapids-class Xeon, 1
		// thread, alternated in one process, against 256: 4096²
		// 1.30-1.31x, 32768×4096 1.16-1.24x, 4096×14336 1.06-1.12x; 1536
		// and 4096 bytes within a few % of it).
		dist := 256
		if kind == "F32" {
			dist = 2048
		}
		prefetch = func(_, off int) {
			if off%64 == 0 {
				PREFETCHT0(Mem{Base: wps[0], Disp: off + dist})
			}
		}
	case kind == "F32":
		// F32's four rows stream twice F16's bytes: each row's line
		// 1024 bytes on into L1 as well as the next group's into L2
		// (Sapphire Rapids-class Xeon, 1 thread, alternated in one
		// process, GB/s against the next group's alone: 4096²
		// 1.01-1.03x, 32768×4096 1.01-1.04x, 4096×14336 1.02-1.04x;
		// against no prefetch: 4096² 0.97-0.98x, 32768×4096 and
		// 4096×14336 1.07-1.09x; the line alone, 512 or 2048 bytes on,
		// two rows or one, 128-element chunks: no better).
		prefetch = func(r, off int) {
			s.prefetch(r, off)
			if off%64 == 0 {
				PREFETCHT0(Mem{Base: wps[r], Disp: off + 1024})
			}
		}
	}
	abase := Load(Param("a"), GP64())
	nch := Load(Param("n"), GP64())
	groups := Load(Param("rows"), GP64())
	out := Load(Param("out"), GP64())
	if R > 1 {
		SHRQ(U8(log2ceil(R)), groups)
	}
	SHRQ(U8(log2ceil(fastChunk)), nch) // chunks
	wbase, ap, n := GP64(), GP64(), GP64()
	MOVQ(wps[0], wbase)
	lanes := t.w / 4               // float32 lanes a register
	nv := 16 / lanes               // registers of the 16 float32 lanes
	nd := 2 * nv                   // registers of the 16 float64 lanes
	L := make([][][]VecVirtual, R) // [row][chunk in flight][lane set]
	D := make([][]VecVirtual, R)
	for r := range R {
		L[r] = make([][]VecVirtual, U)
		for u := range U {
			for range nv {
				L[r][u] = append(L[r][u], t.vec())
			}
		}
		for range nd {
			D[r] = append(D[r], t.vec())
		}
	}
	var hiMask Op
	if kind == "BF16" {
		hiMask = t.konstMem(0xffff0000)
	}
	// add puts the product w·a into lane set h of chunk u of row r: the
	// chunk's first product as it is, the others by FMA.
	add := func(first bool, a Op, w VecVirtual, dst VecVirtual) {
		if first {
			VMULPS(a, w, dst)
		} else {
			VFMADD231PS(a, w, dst)
		}
	}
	wsize := 2 // weight bytes an element
	if kind == "F32" {
		wsize = 4
	}
	// chunk emits chunk u's products (weights at +u·wsize·fastChunk
	// bytes) into L[·][u].
	chunk := func(u int) {
		woff := u * fastChunk * wsize
		switch kind {
		case "F32":
			// F16's order on float32s as they are: the weights go
			// straight from memory into the multiplies where the
			// activations are in a register (four rows share its load).
			for k := range fastChunk / 16 {
				for h := range nv {
					am := Mem{Base: ap, Disp: 4 * (u*fastChunk + 16*k + h*lanes)}
					var av VecVirtual
					if R > 1 {
						av = t.vec()
						VMOVUPS(am, av)
					}
					for r := range R {
						off := woff + 4*(16*k+h*lanes)
						prefetch(r, off)
						wm := Mem{Base: wps[r], Disp: off}
						if R > 1 {
							add(k == 0, wm, av, L[r][u][h])
							continue
						}
						w := t.vec()
						VMOVUPS(wm, w)
						add(k == 0, am, w, L[r][u][h])
					}
				}
			}
		case "F16":
			for k := range fastChunk / 16 {
				for h := range nv {
					// Four rows share one load of the activations.
					var am Op = Mem{Base: ap, Disp: 4 * (u*fastChunk + 16*k + h*lanes)}
					if R > 1 {
						v := t.vec()
						VMOVUPS(am, v)
						am = v
					}
					for r := range R {
						off := woff + 2*(16*k+h*lanes)
						prefetch(r, off)
						w := t.vec()
						VCVTPH2PS(Mem{Base: wps[r], Disp: off}, w)
						add(k == 0, am, w, L[r][u][h])
					}
				}
			}
		case "BF16":
			// A register's dwords hold elements 32g + 2(h·lanes+j) and
			// the next, of the weights and of the activations alike:
			// shifted up 16, the even one is a float32, masked, the odd
			// one. Both go into the lane, even first.
			for g := range fastChunk / 32 {
				for h := range nv {
					off := woff + 2*(32*g+2*h*lanes)
					a, ae := t.vec(), t.vec()
					t.mov(Mem{Base: ap, Disp: off}, a)
					VPSLLD(U8(16), a, ae)
					t.and(hiMask, a, a)
					for r := range R {
						prefetch(r, off)
						d, e := t.vec(), t.vec()
						t.mov(Mem{Base: wps[r], Disp: off}, d)
						VPSLLD(U8(16), d, e)
						add(g == 0, ae, e, L[r][u][h])
						t.and(hiMask, d, d)
						VFMADD231PS(a, d, L[r][u][h])
					}
				}
			}
		default:
			panic("genFastFloat: " + kind)
		}
	}
	// flush adds chunk u's lanes into the float64 lanes: D[2h] gets the
	// low half of lane set h widened, D[2h+1] the high half.
	flush := func(u int) {
		for r := range R {
			for h := range nv {
				lo, hi := t.vec(), t.vec()
				VCVTPS2PD(t.lowHalf(L[r][u][h]), lo)
				VCVTPS2PD(t.highHalf(L[r][u][h]), hi)
				VADDPD(lo, D[r][2*h], D[r][2*h])
				VADDPD(hi, D[r][2*h+1], D[r][2*h+1])
			}
		}
	}
	asize := 4 // activation bytes an element
	if kind == "BF16" {
		asize = 2
	}
	advance := func(chunks int) {
		for r := range R {
			ADDQ(U32(chunks*fastChunk*wsize), wps[r])
		}
		ADDQ(U32(chunks*fastChunk*asize), ap)
	}

	TESTQ(groups, groups)
	JZ(LabelRef("end" + name))
	Label("group" + name)
	MOVQ(nch, n)
	MOVQ(abase, ap)
	for r := range R {
		for _, v := range D[r] {
			t.zero(v)
		}
	}
	if U > 1 {
		Label("loop" + name)
		CMPQ(n, U8(U))
		JB(LabelRef("tail" + name))
		for u := range U {
			chunk(u)
		}
		for u := range U {
			flush(u)
		}
		advance(U)
		SUBQ(U8(U), n)
		JMP(LabelRef("loop" + name))
		Label("tail" + name)
	}
	TESTQ(n, n)
	JZ(LabelRef("done" + name))
	Label("one" + name)
	chunk(0)
	flush(0)
	advance(1)
	DECQ(n)
	JNZ(LabelRef("one" + name))

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
	// The next group of rows.
	s.nextGroup(wbase)
	ADDQ(U8(8*R), out)
	DECQ(groups)
	JNZ(LabelRef("group" + name))
	Label("end" + name)
	VZEROUPPER()
	RET()
}

// genFastPrep emits prepFastF16<suffix>(src *byte, dst *byte, n int): the
// first n activations (n a multiple of fastChunk) of an F16 row as the
// float32s the fast F16 kernels read (kernelkit's fastPrep.rows). BF16
// activations need none: the kernels read them as they are.
func genFastPrep(t *target) {
	name := "prepFastF16" + t.suffix
	TEXT(name, NOSPLIT, "func(src *byte, dst *byte, n int)")
	Pragma("noescape")
	sp := Load(Param("src"), GP64())
	dp := Load(Param("dst"), GP64())
	n := Load(Param("n"), GP64())
	lanes := t.w / 4
	SHRQ(U8(log2ceil(fastChunk)), n)
	JZ(LabelRef("done" + name))
	Label("loop" + name)
	for i := 0; i < fastChunk; i += lanes {
		v := t.vec()
		VCVTPH2PS(Mem{Base: sp, Disp: 2 * i}, v)
		VMOVUPS(v, Mem{Base: dp, Disp: 4 * i})
	}
	ADDQ(U32(2*fastChunk), sp)
	ADDQ(U32(4*fastChunk), dp)
	DECQ(n)
	JNZ(LabelRef("loop" + name))
	Label("done" + name)
	VZEROUPPER()
	RET()
}
