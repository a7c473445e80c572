package quant_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/k3-inference/k3/core/quant"
)

// Input families for the K-quant tests, in 256-element super-blocks.

// kCase is one named family of super-blocks.
type kCase struct {
	name string
	gen  func(rng *rand.Rand, blocks int) []float32
}

func kCases() []kCase {
	return []kCase{
		{"gaussian", perElem(func(r *rand.Rand) float64 { return r.NormFloat64() })},
		{"uniform", perElem(func(r *rand.Rand) float64 { return 2*r.Float64() - 1 })},
		{"heavy-tailed", perElem(func(r *rand.Rand) float64 {
			return max(-1e4, min(1e4, math.Tan(math.Pi*(r.Float64()-0.5))))
		})},
		{"scaled", perGroup(256, func(r *rand.Rand) float64 { return logUniform(r, -8, 4) })},
		{"group-scaled", perGroup(16, func(r *rand.Rand) float64 { return logUniform(r, -3, 1) })},
		{"positive", perElem(func(r *rand.Rand) float64 { return 0.5 + math.Abs(r.NormFloat64()) })},
		{"negative", perElem(func(r *rand.Rand) float64 { return -0.25 - r.ExpFloat64() })},
		{"sparse", perElem(func(r *rand.Rand) float64 {
			if r.IntN(10) != 0 {
				return 0
			}
			return r.NormFloat64()
		})},
		{"edge", kEdgeBlocks},
	}
}

func logUniform(r *rand.Rand, lo, hi float64) float64 { return math.Pow(10, lo+(hi-lo)*r.Float64()) }

func perElem(f func(*rand.Rand) float64) func(*rand.Rand, int) []float32 {
	return func(r *rand.Rand, blocks int) []float32 {
		x := make([]float32, blocks*quant.QK_K)
		for i := range x {
			x[i] = float32(f(r))
		}
		return x
	}
}

// perGroup scales gaussian values by a factor drawn once per group of n.
func perGroup(n int, scale func(*rand.Rand) float64) func(*rand.Rand, int) []float32 {
	return func(r *rand.Rand, blocks int) []float32 {
		x := make([]float32, blocks*quant.QK_K)
		for g := 0; g < len(x); g += n {
			s := scale(r)
			for i := g; i < g+n; i++ {
				x[i] = float32(s * r.NormFloat64())
			}
		}
		return x
	}
}

// kEdgeShapes are super-blocks that stress the scale searches and the fp16
// scales: zeros, spikes, constants, negative maxima, ties, magnitudes whose
// fp16 scales are subnormal, underflow or overflow, float32 subnormals.
var kEdgeShapes = []func(j int) float64{
	func(j int) float64 { return 0 },
	func(j int) float64 { return math.Copysign(0, -1) },
	func(j int) float64 { return b2f(j == 77) },                                         // one spike
	func(j int) float64 { return -3 * b2f(j == 255) },                                   // one negative spike
	func(j int) float64 { return 7 },                                                    // constant
	func(j int) float64 { return -0.3 },                                                 // negative constant
	func(j int) float64 { return float64(j%16) - 7.5 },                                  // halfway points
	func(j int) float64 { return float64(j%8 - 4) },                                     // exact grid, negative max
	func(j int) float64 { return float64(j) - 100 },                                     // ramp, negative max
	func(j int) float64 { return float64(j+1) * 0.01 },                                  // all positive ramp
	func(j int) float64 { return float64(j%3-1) * 1e-6 },                                // fp16-subnormal scales
	func(j int) float64 { return float64(j%5-2) * 3e-9 },                                // scales underflow fp16
	func(j int) float64 { return float64(j%7-3) * 1e-40 },                               // float32 subnormals
	func(j int) float64 { return float64(j%7-3) * 1e-37 },                               // 1/scale overflows
	func(j int) float64 { return float64(j%9-4) * 1e5 },                                 // scales near fp16 max
	func(j int) float64 { return float64(j%9-4) * 1e7 },                                 // fp16 scales overflow
	func(j int) float64 { return 1 + float64(j)*0x1p-20 },                               // narrow range far from 0
	func(j int) float64 { return math.Ldexp(1, j%40-20) },                               // powers of two
	func(j int) float64 { return b2f(j/16 != 3) * math.Sin(float64(j)) },                // one zero group
	func(j int) float64 { return math.Sin(float64(j)) + 500*b2f(j == 40) },              // outlier
	func(j int) float64 { return float64(j%16) * 1e-3 * math.Pow(10, float64(j/16)/4) }, // group scales spread 1e4
	// Non-finite inputs: ggml has no special case, so k3 must do what its
	// arithmetic does with them (the self-tests leave these to parity).
	sineWith(9, math.NaN()),
	sineWith(9, math.Inf(1)),
	sineWith(200, math.Inf(-1)),
}

// sineWith is a sine wave with v at element at.
func sineWith(at int, v float64) func(j int) float64 {
	return func(j int) float64 {
		if j == at {
			return v
		}
		return math.Sin(float64(j))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func kEdgeBlocks(r *rand.Rand, blocks int) []float32 {
	x := make([]float32, blocks*quant.QK_K)
	for b := 0; b < blocks; b++ {
		shape := kEdgeShapes[b%len(kEdgeShapes)]
		s := 1.0
		if b >= len(kEdgeShapes) { // later rounds jitter the same shapes
			s = 1 + 0.1*r.NormFloat64()
		}
		for j := 0; j < quant.QK_K; j++ {
			x[b*quant.QK_K+j] = float32(s * shape(j))
		}
	}
	return x
}

// kInputs concatenates every family, blocks/len(families) super-blocks each,
// and returns the family of each super-block.
func kInputs(seed uint64, blocks int) (x []float32, family []string) {
	r := rand.New(rand.NewPCG(seed, 0x4b3))
	cases := kCases()
	per := max(1, blocks/len(cases))
	for _, c := range cases {
		x = append(x, c.gen(r, per)...)
		for range per {
			family = append(family, c.name)
		}
	}
	return x, family
}

// rawBlocks returns random bytes for n blocks of t, with every fp16 scale
// (or Q8_K's float32 d) replaced by a finite random value, so dequantize and
// dot products see every bit pattern of the quants and 6-bit scales.
func rawBlocks(r *rand.Rand, t quant.Type, n int) []byte {
	size := t.TypeSize()
	b := make([]byte, n*size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		blk := b[i*size : (i+1)*size]
		for _, off := range scaleOffsets(t) {
			binary.LittleEndian.PutUint16(blk[off:], quant.FP32ToFP16(float32(r.NormFloat64()*logUniform(r, -7, 1))))
		}
		if t == quant.Q8_K {
			q8KRawBlock(r, blk)
		}
	}
	return b
}

// scaleOffsets lists the byte offsets of a block's fp16 scales.
func scaleOffsets(t quant.Type) []int {
	switch t {
	case quant.Q2_K:
		return []int{80, 82}
	case quant.Q3_K:
		return []int{108}
	case quant.Q4_K, quant.Q5_K:
		return []int{0, 2}
	case quant.Q6_K:
		return []int{208}
	}
	return nil
}

// q8KRawBlock fills a Q8_K block the way quantize_row_q8_K could have: quants
// in [-127, 127] (never -128), bsums that are their group sums, a finite d.
func q8KRawBlock(r *rand.Rand, blk []byte) {
	binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(r.NormFloat64()*logUniform(r, -6, 1))))
	for g := 0; g < quant.QK_K/16; g++ {
		sum := 0
		for i := 0; i < 16; i++ {
			q := r.IntN(255) - 127
			blk[4+16*g+i] = byte(int8(q))
			sum += q
		}
		binary.LittleEndian.PutUint16(blk[4+quant.QK_K+2*g:], uint16(int16(sum)))
	}
}
