package kernelkit

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/k3-inference/k3/core/quant"
)

// The plain float types' reference (core/quant/float.go, ggml's scalar
// ggml_vec_dot_f32/f16/bf16) rounds every product to float32 and adds the
// products one after another in float64, from +0, then rounds to float32.
// That chain is one dependent add per element; the kernels instead add the
// same products in another order and return what exactFloatCheck needs to
// prove that the order cannot change the float32 result. Where it cannot
// prove it, the reference's sum runs.
//
// The kernels read a prepared activation row (floatPrep below): float64
// values for F16 and BF16, whose products are exact in float64, so the
// kernels multiply-add in float64 straight from the widened weights;
// float32 for F32, whose products they round to float32 first as the
// reference does. The row's header holds Σa², and the kernels return Σw²
// over their part: by Cauchy-Schwarz, sqrt(Σw²·Σa²) >= Σ|w·a|, the bound's
// A, at one multiply-add per vector.
//
// The kernels (tools/asmgen/exact_float.go) split the first m elements
// (m a multiple of floatChunk = C) into chunks; each chunk's products,
// in float64, are added in a tree where no product goes through more than
// floatTree = h roundings; the chunk sums go into a running total T (one
// float64 add per chunk), and |T| after each chunk into prefix. They
// return sum = T, prefix and w2. The Go code below adds the last n-m (< C)
// products to T one by one, |T| after each into prefix and |p| into abs.
//
// Proof that float32(R) = float32(s), R the reference's float64 sum, s
// ours, whenever the check below passes. u = 2^-53; p_k the reference's
// products, S_k = p_1+...+p_k exactly, A = Σ|p_k|, γ_k = ku/(1-ku).
//
//  1. Round to nearest gives |fl(x) - x| <= u|fl(x)| (exact in the
//     subnormal range; nothing overflows: |S_k| <= n·2^128). With r_k the
//     reference's running sum, R - S_n = Σ e_k, |e_k| <= u|r_k|, and
//     |r_k - S_k| <= γ_n A (Higham, Accuracy and Stability, 4.2), so
//     |R - S_n| <= u Σ_k |S_k| + n u γ_n A.
//  2. For k in chunk c (the Go tail is one more, shorter chunk),
//     |S_k| <= |S_cC| + A_c, so Σ_k |S_k| <= C Σ_c |S_cC| + C A,
//     c = 0..N, N the number of full chunks.
//  3. T after chunk c is a float64 sum of the same products:
//     |S_cC - T_c| <= γ_n A; prefix sums those |T_c| (N+t nonnegative
//     terms, relative error <= γ_n): Σ_c |S_cC| <= prefix(1+2γ_n) + (N+1)γ_n A.
//  4. s - S_n: each chunk tree errs by at most γ_h A_c; each add into T
//     (chunk sums, tail products) by at most u|new T|, all in prefix. So
//     |s - S_n| <= γ_h A + u·prefix. BF16 only: the kernels add the exact
//     products where the reference has them rounded to float32, which
//     changes only products in float32's subnormal range (|p| < 2^-126;
//     a bf16 times a bf16 has 16 significant bits), each by at most
//     2^-150: at most n·2^-150 more, the extra term. A product that
//     overflows float32 in the reference has |p| >= 2^128 > abs below:
//     the check refuses abs >= 2^127.
//  5. abs = sqrt(w2·Σa²) + the tail's Σ|p|: w2 is a float32 sum of at most
//     n/8+8 squares per value (the kernels' lanes and their reduction),
//     Σa² a float64 sum, for n <= 2^20 within 2^-7 and 2^-32 of the
//     exact; F32's products are at most 2^-24 above |w·a|. So A <= 1.01 abs.
//  6. Together, with n <= 2^20 making every γ_n term below 2^-10 A u:
//     |R - s| <= u((C+1.01)·prefix + (C+h+1)·1.01·abs) + extra
//     <= u((C+2)·prefix + (C+h+4)·abs) + extra = bound/1.125 + extra.
//     The computed bound errs by a few u of itself, s ± bound by u(|s| +
//     bound) <= u(1.02 abs + bound), less than the margin bound/9 >=
//     u(C+h+4)abs/8 = 18u·abs, so lo = fl(s-bound) <= R <= fl(s+bound) = hi.
//  7. Rounding to float32 is monotonic (overflow to ±Inf included), so if
//     float32(lo) and float32(hi) have the same bits, float32(R) has them
//     too. Comparing bits, not values, keeps ±0 apart: float32(lo) = +0
//     means lo >= 0 (s is never -0: every sum starts at +0), so R >= 0
//     and the reference's +0-started sum rounds to +0; -0 for both means
//     hi < 0, R < 0, and -0.
//
// A NaN or Inf anywhere makes sum or bound non-finite, and the reference's
// sum decides (seqFloat: the same products added in the same order). How
// often the check fails: about 2·bound/ulp(float32) of rows, some 1e-4 of
// random gaussian rows of 4096, 0.1-0.2% of the side-by-side benchmark's
// (products over 24 octaves).
const (
	floatChunk = 128
	floatTree  = 12
	maxExactN  = 1 << 20
)

// exactFloatCheck returns the float32 the reference's sequential float64
// sum rounds to, given another order's float64 sum s, and ok false where
// the bound above cannot decide.
func exactFloatCheck(s, prefix, abs, extra float64) (float32, bool) {
	bound := 0x1.2p-53*((floatChunk+2)*prefix+(floatChunk+floatTree+4)*abs) + extra
	if s-s != 0 || !(bound <= math.MaxFloat64) || !(abs < 0x1p127) {
		return 0, false
	}
	lo, hi := float32(s-bound), float32(s+bound)
	return lo, math.Float32bits(lo) == math.Float32bits(hi)
}

// floatPrep prepares activation rows for one plain float type's kernel and
// runs it. A prepared row is a 64-byte header (Σa² as a float64), then the
// n values: for F32 its float32s; for F16 and BF16 float64s times 2^896
// (the kernels widen the weights into float64s times 2^-896, by integer
// ops), in the order the widening yields within the whole chunks: in each
// 16 elements the 8 even ones then the 8 odd ones (F16), in each 32 the 8
// with index 0 mod 4, then 2, 1 and 3 mod 4 (BF16); then, 64-byte aligned,
// the plain row, for the reference's sum where the bound fails.
type floatPrep struct {
	t    quant.Type
	size int // bytes of a prepared value
	kern floatKernel
	nrow int                             // the rows kern takes
	seqK func(w, a *byte, n int) float64 // the reference's sum, on plain rows (nil: Go)
}

// floatKernel is a plain float kernel (Funcs.F32, F16, BF16): nrow weight
// rows wstride bytes apart times a prepared row, row r's sum, prefix and
// w2 into out[3r:3r+3].
type floatKernel func(w *byte, wstride int, a *byte, n int, out *float64)

// maxFloatRows bounds Funcs.FloatRows.
const maxFloatRows = 8

const (
	floatHeader = 64
	floatScale  = 0x1p896
)

func newFloatPrep(t quant.Type, kern floatKernel, nrow int, seq func(w, a *byte, n int) float64) *floatPrep {
	p := &floatPrep{t: t, size: 8, kern: kern, nrow: min(max(nrow, 1), maxFloatRows), seqK: seq}
	if t == quant.F32 {
		p.size = 4
	}
	return p
}

// rowSize is a prepared row's bytes, a multiple of 64: rows stay aligned
// back to back.
func (p *floatPrep) rowSize(n int) int { return p.plainAt(n) + (n*p.t.TypeSize()+63)&^63 }

// plainAt is where the plain row starts in a prepared row (F32's values
// are its plain row).
func (p *floatPrep) plainAt(n int) int {
	if p.t == quant.F32 {
		return floatHeader
	}
	return (floatHeader + n*p.size + 63) &^ 63
}

// slot is where element i's value sits in a prepared row of n elements.
func (p *floatPrep) slot(i, n int) int {
	if i >= n&^(floatChunk-1) {
		return i
	}
	switch p.t {
	case quant.F16:
		return i&^15 + i%2*8 + i%16/2
	case quant.BF16:
		return i&^31 + bf16Block[i%4]*8 + i%32/4
	}
	return i
}

// rows prepares m activation rows of n elements, arow bytes apart, into
// *bp (grown as needed) and returns them back to back, rowSize(n) apart.
func (p *floatPrep) rows(a []byte, n, arow, m int, bp *[]byte) []byte {
	prow := p.rowSize(n)
	size := m * prow
	if cap(*bp) < size+63 {
		*bp = make([]byte, size+63)
	}
	b := (*bp)[:cap(*bp)]
	al := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	dst := b[al : al+size]
	es := p.t.TypeSize()
	for j := range m {
		src, d := a[j*arow:j*arow+n*es], dst[j*prow:(j+1)*prow]
		x2 := p.prepRow(src, n, d[floatHeader:])
		binary.LittleEndian.PutUint64(d, math.Float64bits(x2))
		if p.t != quant.F32 {
			copy(d[p.plainAt(n):], src)
		}
	}
	return dst
}

// prepRow writes the values of the plain row src into d and returns Σa²
// (four partial sums: one float64 add chain would cost four cycles an
// element).
func (p *floatPrep) prepRow(src []byte, n int, d []byte) float64 {
	var s0, s1, s2, s3 float64
	sq := func(v []float64) {
		for i := 0; i+4 <= len(v); i += 4 {
			s0 += v[i] * v[i]
			s1 += v[i+1] * v[i+1]
			s2 += v[i+2] * v[i+2]
			s3 += v[i+3] * v[i+3]
		}
		for i := len(v) &^ 3; i < len(v); i++ {
			s0 += v[i] * v[i]
		}
	}
	var buf [floatChunk]float64
	m := n &^ (floatChunk - 1)
	for c := 0; c < n; c += floatChunk {
		k := min(floatChunk, n-c)
		v := buf[:k]
		switch p.t {
		case quant.F32:
			for i := range v {
				v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*(c+i):])))
			}
			copy(d[4*c:], src[4*c:4*(c+k)])
		case quant.F16:
			for i := range v {
				v[i] = float64(quant.FP16ToFP32(binary.LittleEndian.Uint16(src[2*(c+i):])))
			}
		default:
			for i := range v {
				v[i] = float64(quant.BF16ToFP32(binary.LittleEndian.Uint16(src[2*(c+i):])))
			}
		}
		sq(v)
		if p.t == quant.F32 {
			continue
		}
		out := d[8*c : 8*(c+k)]
		for i, x := range v {
			slot := i
			if c < m {
				if p.t == quant.F16 {
					slot = i&^15 + i%2*8 + i%16/2
				} else {
					slot = i&^31 + bf16Block[i%4]*8 + i%32/4
				}
			}
			binary.LittleEndian.PutUint64(out[8*slot:], math.Float64bits(x*floatScale))
		}
	}
	return s0 + s1 + s2 + s3
}

// bf16Block is the quarter of a prepared BF16 group that element i of the
// group goes to, by i mod 4.
var bf16Block = [4]int{0, 2, 1, 3}

// dot is one weight row times the prepared row pa (the kernel runs it as
// each of its rows).
func (p *floatPrep) dot(n int, w, pa []byte) float32 {
	var out [3 * maxFloatRows]float64
	m := n &^ (floatChunk - 1)
	if n <= maxExactN && m > 0 {
		es := p.t.TypeSize()
		w, a := w[:m*es], pa[floatHeader:floatHeader+m*p.size]
		p.kern(&w[0], 0, &a[0], m, &out[0])
	}
	return p.finish(n, w, pa, out[:3])
}

// rows8 is eight weight rows, wrow bytes apart, times pa.
func (p *floatPrep) rows8(n int, w []byte, wrow int, pa []byte, out *[8]float32) {
	var o [3 * maxFloatRows]float64
	m := n &^ (floatChunk - 1)
	es := p.t.TypeSize()
	for r0 := 0; r0 < 8; r0 += p.nrow {
		if n <= maxExactN && m > 0 {
			w, a := w[r0*wrow:(r0+p.nrow-1)*wrow+m*es], pa[floatHeader:floatHeader+m*p.size]
			p.kern(&w[0], wrow, &a[0], m, &o[0])
		}
		for r := r0; r < r0+p.nrow; r++ {
			out[r] = p.finish(n, w[r*wrow:], pa, o[3*(r-r0):3*(r-r0)+3])
		}
	}
}

// finish adds the tail of the row to the kernel's k = (sum, prefix, w2) of
// its first whole chunks and checks the bound, or runs the reference.
func (p *floatPrep) finish(n int, w, pa []byte, k []float64) float32 {
	if n > maxExactN {
		return p.seq(n, w, pa)
	}
	es := p.t.TypeSize()
	m := n &^ (floatChunk - 1)
	plain := pa[p.plainAt(n):]
	s, prefix := k[0], k[1]
	var abs, extra float64
	if m > 0 {
		x2 := math.Float64frombits(binary.LittleEndian.Uint64(pa))
		abs = math.Sqrt(k[2] * x2)
		if p.t == quant.BF16 {
			extra = float64(m) * 0x1p-150
		}
	}
	for i := m; i < n; i++ {
		q := float64(float32(elem(p.t, w[i*es:]) * elem(p.t, plain[i*es:])))
		s += q
		prefix += math.Abs(s)
		abs += math.Abs(q)
	}
	if r, ok := exactFloatCheck(s, prefix, abs, extra); ok {
		return r
	}
	floatFallbacks.Add(1)
	return p.seq(n, w, pa)
}

// seq is the reference's sum over the plain rows: the products rounded to
// float32, added in element order to a float64 from +0; the kernel seqK
// adds the first multiple of 8, Go the rest.
func (p *floatPrep) seq(n int, w, pa []byte) float32 {
	es := p.t.TypeSize()
	a := pa[p.plainAt(n):]
	var s float64
	i := 0
	if m := n &^ 7; m > 0 && p.seqK != nil {
		w, a := w[:m*es], a[:m*es]
		s, i = p.seqK(&w[0], &a[0], m), m
	}
	for ; i < n; i++ {
		s += float64(float32(elem(p.t, w[i*es:]) * elem(p.t, a[i*es:])))
	}
	return float32(s)
}

// floatPool holds Dot's prepared rows.
var floatPool = sync.Pool{New: func() any { return new([]byte) }}

// dotFunc is Dot's kernel: it prepares its activation row first.
func (p *floatPrep) dotFunc() dotFunc {
	return func(n int, w, a []byte) float32 {
		bp := floatPool.Get().(*[]byte)
		defer floatPool.Put(bp)
		return p.dot(n, w, p.rows(a, n, 0, 1, bp))
	}
}

// floatFallbacks counts the rows the bound could not decide.
var floatFallbacks atomic.Int64

// FloatFallbacks is how many plain-float rows fell back to the reference
// (rows past maxExactN are not counted): tests check their near-tie rows
// take that path.
func FloatFallbacks() int64 { return floatFallbacks.Load() }

// elem is the element of type t at b, as float32 (exact).
func elem(t quant.Type, b []byte) float32 {
	switch t {
	case quant.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	case quant.F16:
		return quant.FP16ToFP32(binary.LittleEndian.Uint16(b))
	default:
		return quant.BF16ToFP32(binary.LittleEndian.Uint16(b))
	}
}
