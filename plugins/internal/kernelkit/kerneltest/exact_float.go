package kerneltest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// The plain float kernels add the reference's float32 products in another
// order and prove, from a bound on the difference, that the float32 result
// is the same; where the bound cannot decide they run the reference
// (kernelkit/exactfloat.go). DotFloatBoundary builds the rows where that
// matters: sums on a float32 rounding boundary, where adding the same
// products in another order gives another float32, and rows with Inf, NaN,
// signed zeros, subnormals and products that overflow or underflow
// float32.

var floatTypes = []quant.Type{quant.F32, quant.F16, quant.BF16}

// putFloat stores v (exactly representable in t) as element i of row b.
func putFloat(t quant.Type, b []byte, i int, v float32) {
	switch t {
	case quant.F32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	case quant.F16:
		binary.LittleEndian.PutUint16(b[2*i:], quant.FP32ToFP16(v))
	default:
		binary.LittleEndian.PutUint16(b[2*i:], quant.FP32ToBF16(v))
	}
}

func encodeFloats(t quant.Type, v []float32) []byte {
	b := make([]byte, len(v)*t.TypeSize())
	for i, x := range v {
		putFloat(t, b, i, x)
	}
	return b
}

// tieScale returns, for t, a big product big, half a float32 ulp of it
// (so big+half is a float32 midpoint) and a tiny product below half a
// float64 ulp of big, each as w·a with w and a representable in t.
func tieScale(t quant.Type) (big, half, tiny [2]float32) {
	if t == quant.F16 {
		// 64 + 2^-18 is a midpoint; 2^-48 (the smallest half squared) is
		// below 2^-47, half a float64 ulp of 64.
		return [2]float32{8, 8}, [2]float32{0x1p-9, 0x1p-9}, [2]float32{0x1p-24, 0x1p-24}
	}
	return [2]float32{1, 1}, [2]float32{0x1p-12, 0x1p-12}, [2]float32{0x1p-27, 0x1p-27}
}

// tieRow is n products: the tiny one everywhere, big at ib and half at ih,
// times sign; tinies are zero with zeroTiny.
func tieRow(t quant.Type, n, ib, ih int, sign float32, zeroTiny bool) (w, a []byte) {
	big, half, tiny := tieScale(t)
	wv, av := make([]float32, n), make([]float32, n)
	for i := range wv {
		wv[i], av[i] = sign*tiny[0], tiny[1]
		if zeroTiny {
			wv[i] = 0
		}
	}
	wv[ib], av[ib] = sign*big[0], big[1]
	wv[ih], av[ih] = sign*half[0], half[1]
	return encodeFloats(t, wv), encodeFloats(t, av)
}

// DotFloatBoundary checks the plain float kernels on rows whose sum lies
// on or next to a float32 rounding boundary (the reference's float32 then
// depends on the order of its float64 adds: a kernel that trusted its own
// order would differ) and on rows with special values, on every level; on
// the SIMD levels the near-tie rows must take the reference path.
func DotFloatBoundary(t *testing.T, k *kernelkit.Kit) {
	forEachLevel(t, k, func(t *testing.T) {
		simd := k.Level() != "generic"
		for _, typ := range floatTypes {
			t.Run(typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), 7))
				before := kernelkit.FloatFallbacks()
				ties := 0
				for _, n := range []int{2, 127, 128, 256, 300, 1000} {
					for rep := 0; rep < 8; rep++ {
						ib, ih := r.IntN(n), r.IntN(n)
						for ih == ib {
							ih = r.IntN(n)
						}
						if rep == 0 {
							ib, ih = 0, 1 // the tinies after: the reference absorbs them
						}
						if rep == 1 {
							ib, ih = n-2, n-1 // the tinies first: they add up, then tip the tie
						}
						var mat []byte
						var act []byte
						for _, sign := range []float32{1, -1} {
							for _, zero := range []bool{false, true} {
								w, a := tieRow(typ, n, ib, ih, sign, zero)
								checkDot(t, k, typ, n, w, a)
								if zero {
									ties += 2 // exactly on the boundary: no bound decides it (here and in MatVec)
								}
								mat, act = append(mat, w...), a
								// Random rows between the ties put them at every
								// place of MatVec's row groups.
								mat = append(mat, randWeights(r, typ, n*(rep%3))...)
							}
						}
						checkMatVec(t, k, typ, n, mat, act)
					}
				}
				if got := kernelkit.FloatFallbacks() - before; simd && got < int64(ties) {
					t.Errorf("%d rows fell back to the reference, want at least the %d exact ties", got, ties)
				}
				specialRows(t, k, typ, r)
				cancellingRows(t, k, typ, r)
			})
		}
	})
}

// specialRows mixes special values into random rows of several lengths.
func specialRows(t *testing.T, k *kernelkit.Kit, typ quant.Type, r *rand.Rand) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	type pair struct{ w, a float32 }
	specials := []pair{
		{inf, 1}, {-inf, 2}, {inf, 0}, {nan, 1}, {inf, -inf},
		{float32(math.Copysign(0, -1)), 1}, {0, -1},
	}
	if typ == quant.F16 {
		specials = append(specials,
			pair{0x1p-24, 0x1p-24}, pair{0x1p-14, -0x1p-20}, pair{65504, 65504}, pair{-65504, 65504})
	} else {
		specials = append(specials,
			pair{0x1p100, 0x1p100},   // overflows float32 to Inf
			pair{0x1p-70, 0x1p-70},   // a float32 subnormal
			pair{0x1.8p-75, 0x1p-75}, // rounds in the subnormal range
			pair{0x1p-100, -0x1p-60}, // underflows to -0
			pair{0x1p-126, 0x1p-23},  // the smallest subnormal
			pair{0x1p63, 0x1p64})     // the largest binade
	}
	for _, n := range []int{1, 100, 128, 129, 512, 700} {
		for _, sp := range specials {
			for _, all := range []bool{false, true} {
				wv, av := make([]float32, n), make([]float32, n)
				for i := range wv {
					wv[i], av[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
					if all {
						wv[i], av[i] = sp.w, sp.a
					}
				}
				if !all {
					i := r.IntN(n)
					wv[i], av[i] = sp.w, sp.a
				}
				checkDot(t, k, typ, n, encodeFloats(typ, wv), encodeFloats(typ, av))
			}
		}
	}
}

// cancellingRows are random rows whose last products nearly cancel the
// rest, so the result is small next to the sum of |products| and the bound
// is often too wide: both paths run on many rows.
func cancellingRows(t *testing.T, k *kernelkit.Kit, typ quant.Type, r *rand.Rand) {
	rows := 3000
	if testing.Short() {
		rows = 300
	}
	for range rows {
		n := 2 + r.IntN(700)
		wv, av := make([]float32, n), make([]float32, n)
		var s float64
		for i := range n - 1 {
			wv[i], av[i] = float32(r.NormFloat64()), float32(math.Ldexp(r.Float64(), -r.IntN(12)))
			s += float64(wv[i]) * float64(av[i])
		}
		wv[n-1], av[n-1] = float32(-s), 1
		w, a := encodeFloats(typ, wv), encodeFloats(typ, av)
		checkDot(t, k, typ, n, w, a)
	}
}

// checkMatVec compares MatVec over the rows of w with the reference, row
// by row.
func checkMatVec(t *testing.T, k *kernelkit.Kit, typ quant.Type, n int, w, a []byte) {
	t.Helper()
	wrow, _ := quant.RowSize(typ, int64(n))
	rows := len(w) / int(wrow)
	out := make([]float32, rows)
	if err := k.MatVec(typ, w, rows, n, a, out, 1); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		want, err := quant.VecDot(typ, n, w[int64(i)*wrow:], a)
		if err != nil {
			t.Fatal(err)
		}
		if !sameFloat(out[i], want) {
			t.Fatalf("%s n=%d MatVec row %d of %d: got %g (%#08x), reference %g (%#08x)",
				typ, n, i, rows, out[i], math.Float32bits(out[i]), want, math.Float32bits(want))
		}
	}
}
