package quant

import (
	"math"
	"math/rand/v2"
)

// blockInputCase is a named family of test rows for the 32-element block
// types; the parity tests in package quant_test build the same families.
type blockInputCase struct {
	name string
	gen  func(rng *rand.Rand, n int) []float32
}

// blockInputCases returns random distributions at scales from 1e-8 to 1e4
// plus hand-made edge cases. n must be a multiple of 32.
func blockInputCases() []blockInputCase {
	cases := []blockInputCase{
		{"gaussian", func(rng *rand.Rand, n int) []float32 {
			return fillRand(n, func() float32 { return float32(rng.NormFloat64()) })
		}},
		{"uniform", func(rng *rand.Rand, n int) []float32 {
			return fillRand(n, func() float32 { return float32(2*rng.Float64() - 1) })
		}},
		{"heavy-tailed", func(rng *rand.Rand, n int) []float32 {
			// Cauchy, clipped so the largest blocks stay finite in fp16 after scaling.
			return fillRand(n, func() float32 { return float32(max(-1e4, min(1e4, math.Tan(math.Pi*(rng.Float64()-0.5))))) })
		}},
		{"scaled", func(rng *rand.Rand, n int) []float32 {
			// Each block gets its own scale, log-uniform in [1e-8, 1e4].
			x := make([]float32, n)
			for b := 0; b < n; b += 32 {
				s := math.Pow(10, -8+12*rng.Float64())
				for j := b; j < b+32; j++ {
					x[j] = float32(s * rng.NormFloat64())
				}
			}
			return x
		}},
		{"edge", func(rng *rand.Rand, n int) []float32 { return edgeBlocks(rng, n, edgeKinds) }},
		{"overflow", func(rng *rand.Rand, n int) []float32 { return edgeBlocks(rng, n, overflowKinds) }},
	}
	return cases
}

func fillRand(n int, f func() float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = f()
	}
	return x
}

// edgeKinds are blocks that stress the scale and rounding logic: zeros, a
// single value, negative maxima, ties, scales that are subnormal in fp16 and
// float32 subnormals. Their scales stay finite, so dot products over them
// stay finite and comparable.
var edgeKinds = []func(j int) float32{
	func(j int) float32 { return 0 },
	func(j int) float32 { return float32(math.Copysign(0, -1)) },
	func(j int) float32 { return map[bool]float32{true: 1}[j == 5] },
	func(j int) float32 { return map[bool]float32{true: -3}[j == 31] },
	func(j int) float32 { return float32(j%16-8) * 0.25 },              // exact Q4_0 grid, negative max
	func(j int) float32 { return float32(j) - 15.5 },                   // halfway points
	func(j int) float32 { return -float32(j + 1) },                     // all negative
	func(j int) float32 { return float32(j + 1) },                      // all positive
	func(j int) float32 { return 7 },                                   // constant
	func(j int) float32 { return float32(j%3-1) * 1e-6 },               // fp16-subnormal scales
	func(j int) float32 { return float32(j%5-2) * 3e-9 },               // scale underflows fp16
	func(j int) float32 { return float32(j%7-3) * 1e-40 },              // float32 subnormals
	func(j int) float32 { return float32(j%7-3) * 1e-37 },              // 1/d overflows
	func(j int) float32 { return float32(j%9-4) * 3e3 },                // large, every scale in range
	func(j int) float32 { return float32(1 + float64(j)*0x1p-20) },     // narrow range far from 0
	func(j int) float32 { return float32(math.Ldexp(1, j-16)) },        // powers of two
	func(j int) float32 { return float32(math.Ldexp(1, j-16)) * 0.75 }, // between binades
	func(j int) float32 { return float32(-math.Ldexp(0.99999994, 2)) }, // just below a power of two
}

// overflowKinds have scales beyond fp16's range (inf scales, NaN products).
var overflowKinds = []func(j int) float32{
	func(j int) float32 { return float32(j%9-4) * 1e6 },
	func(j int) float32 { return float32(j%9-4) * 1e30 },
	func(j int) float32 { return float32(j) * 3e38 / 32 },
	func(j int) float32 { return float32(j%9-4) * 2e4 }, // Q4_1/Q5_1 minimum overflows, others near the top
	func(j int) float32 { return float32(j%9-4) * 1e3 }, // finite, so rows mix both
}

// edgeBlocks cycles through kinds block by block, jittering the scale of
// the repeats.
func edgeBlocks(rng *rand.Rand, n int, kinds []func(j int) float32) []float32 {
	x := make([]float32, n)
	for b := 0; b < n/32; b++ {
		k := kinds[b%len(kinds)]
		for j := 0; j < 32; j++ {
			x[32*b+j] = k(j)
		}
		if b >= len(kinds) { // later rounds: jitter the same shapes
			s := float32(1 + 0.1*rng.NormFloat64())
			for j := 0; j < 32; j++ {
				x[32*b+j] *= s
			}
		}
	}
	return x
}
