package quant

import (
	"math/rand/v2"
	"testing"
)

// Benchmarks of the reference kernels of the non-K types; SetBytes is the
// size of the weight data, so MB/s reads as weight bandwidth.

var benchBlockTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4}

const benchRowLen = 4096

func benchRow(b *testing.B, typ Type, seed uint64) []byte {
	b.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	x := fillRand(benchRowLen, func() float32 { return float32(rng.NormFloat64()) })
	n, err := RowSize(typ, benchRowLen)
	if err != nil {
		b.Fatal(err)
	}
	q := make([]byte, n)
	if err := Quantize(typ, x, q); err != nil {
		b.Fatal(err)
	}
	return q
}

func BenchmarkBlockDequantize(b *testing.B) {
	for _, typ := range benchBlockTypes {
		b.Run(typ.String(), func(b *testing.B) {
			q := benchRow(b, typ, 1)
			dst := make([]float32, benchRowLen)
			b.SetBytes(int64(len(q)))
			for b.Loop() {
				if err := Dequantize(typ, q, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBlockQuantize(b *testing.B) {
	for _, typ := range append(benchBlockTypes, Q8_1) {
		b.Run(typ.String(), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(2, 1))
			x := fillRand(benchRowLen, func() float32 { return float32(rng.NormFloat64()) })
			n, _ := RowSize(typ, benchRowLen)
			dst := make([]byte, n)
			b.SetBytes(4 * benchRowLen)
			for b.Loop() {
				if err := Quantize(typ, x, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBlockVecDot(b *testing.B) {
	for _, typ := range benchBlockTypes {
		b.Run(typ.String(), func(b *testing.B) {
			w := benchRow(b, typ, 3)
			a := benchRow(b, typ.VecDotType(), 4)
			b.SetBytes(int64(len(w)))
			var sink float32
			for b.Loop() {
				s, err := VecDot(typ, benchRowLen, w, a)
				if err != nil {
					b.Fatal(err)
				}
				sink += s
			}
			_ = sink
		})
	}
}
