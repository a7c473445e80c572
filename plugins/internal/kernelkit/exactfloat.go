package kernelkit

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/k3-inference/k3/core/quant"
)

// The plain float types' reference (core/quant/float.go, ggml's scalar
// ggml_vec_dot_f32/f16/bf16) rounds every product to float32 and adds the
// products one after another in float64, from +0, then rounds to float32.
// That chain is one dependent add per element; the kernels instead compute
// the same float32 products, add them in another order and return what
// exactFloat needs to prove that the order cannot change the float32
// result. Where it cannot prove it, it runs the reference.
//
// The kernels (tools/asmgen/exact_float.go) split the first m elements
// (m a multiple of floatChunk = C) into chunks; each chunk's products,
// widened to float64, are added in a tree where no product goes through
// more than floatTree = h additions; the chunk sums go into a running
// total T (one float64 add per chunk), and |T| after each chunk into
// prefix. They return sum = T, prefix and abs, the float32-lane sum of
// |products|. The Go code below adds the last n-m (< C) products to T
// one by one, and |T| after each into prefix.
//
// Proof that float32(R) = float32(s), R the reference's float64 sum, s
// ours, whenever the check below passes. u = 2^-53; p_k the products,
// S_k = p_1+...+p_k exactly, A = Σ|p_k|, γ_k = ku/(1-ku).
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
//     |s - S_n| <= γ_h A + u·prefix.
//  5. abs is float32 sums of at most n/8+8 terms per value (the kernels'
//     lanes and their reduction) plus float64 tail terms: for
//     n <= 2^20, A <= abs·(1 + 2^-6.9) <= 1.01 abs.
//  6. Together, with n <= 2^20 making every γ_n term below 2^-10 A u:
//     |R - s| <= u((C+1.01)·prefix + (C+h+1)·1.01·abs)
//     <= u((C+2)·prefix + (C+h+4)·abs) = bound/1.125.
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
func exactFloatCheck(s, prefix, abs float64) (float32, bool) {
	bound := 0x1.2p-53 * ((floatChunk+2)*prefix + (floatChunk+floatTree+4)*abs)
	if s-s != 0 || !(bound <= math.MaxFloat64) {
		return 0, false
	}
	lo, hi := float32(s-bound), float32(s+bound)
	return lo, math.Float32bits(lo) == math.Float32bits(hi)
}

// exactFloat adapts a plain-float kernel: it adds the tail of the row and
// checks the bound, or falls back to the reference.
func exactFloat(f func(w, a *byte, n int) (sum, prefix, abs float64), seq func(w, a *byte, n int) float64, t quant.Type) dotFunc {
	es := t.TypeSize()
	return func(n int, w, a []byte) float32 {
		if n > maxExactN {
			return refDot(t, n, w, a)
		}
		m := n &^ (floatChunk - 1)
		var s, prefix, abs float64
		if m > 0 {
			w, a := w[:m*es], a[:m*es]
			s, prefix, abs = f(&w[0], &a[0], m)
		}
		for i := m; i < n; i++ {
			p := float64(floatProduct(t, w[i*es:], a[i*es:]))
			s += p
			prefix += math.Abs(s)
			abs += math.Abs(p)
		}
		if r, ok := exactFloatCheck(s, prefix, abs); ok {
			return r
		}
		floatFallbacks.Add(1)
		if seq == nil {
			return refDot(t, n, w, a)
		}
		return seqFloat(seq, t, n, w, a)
	}
}

// seqFloat is the reference's sum: the kernel seq adds the products of
// the first multiple of 8 elements in order from +0, Go the rest.
func seqFloat(seq func(w, a *byte, n int) float64, t quant.Type, n int, w, a []byte) float32 {
	es := t.TypeSize()
	m := n &^ 7
	var s float64
	if m > 0 {
		w, a := w[:m*es], a[:m*es]
		s = seq(&w[0], &a[0], m)
	}
	for i := m; i < n; i++ {
		s += float64(floatProduct(t, w[i*es:], a[i*es:]))
	}
	return float32(s)
}

// floatFallbacks counts the rows the bound could not decide.
var floatFallbacks atomic.Int64

// FloatFallbacks is how many plain-float rows fell back to the reference
// (rows past maxExactN are not counted): tests check their near-tie rows
// take that path.
func FloatFallbacks() int64 { return floatFallbacks.Load() }

// floatProduct is the reference's product of the elements at w and a,
// rounded to float32.
func floatProduct(t quant.Type, w, a []byte) float32 {
	switch t {
	case quant.F32:
		x := math.Float32frombits(binary.LittleEndian.Uint32(w))
		y := math.Float32frombits(binary.LittleEndian.Uint32(a))
		return float32(x * y)
	case quant.F16:
		return float32(quant.FP16ToFP32(binary.LittleEndian.Uint16(w)) * quant.FP16ToFP32(binary.LittleEndian.Uint16(a)))
	default:
		return float32(quant.BF16ToFP32(binary.LittleEndian.Uint16(w)) * quant.BF16ToFP32(binary.LittleEndian.Uint16(a)))
	}
}
