package quant_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// Benchmarks of the K-quant reference kernels on one 4096-element row.
// Dequantize and Quantize report float32 bytes per second; VecDot reports
// weight bytes per second, the figure that matters when weights stream.

const kBenchN = 16 * quant.QK_K

func kBenchRow(typ quant.Type) (x []float32, w, act []byte) {
	rng := rand.New(rand.NewPCG(21, 21))
	x = kCases()[0].gen(rng, kBenchN/quant.QK_K)
	w = make([]byte, kBenchN/quant.QK_K*typ.TypeSize())
	act = make([]byte, kBenchN/quant.QK_K*quant.Q8_K.TypeSize())
	if err := quant.Quantize(typ, x, w); err != nil {
		panic(err)
	}
	if err := quant.Quantize(quant.Q8_K, kCases()[0].gen(rng, kBenchN/quant.QK_K), act); err != nil {
		panic(err)
	}
	return x, w, act
}

func BenchmarkKDequantize(b *testing.B) {
	for _, typ := range kAllTypes {
		b.Run(typ.String(), func(b *testing.B) {
			_, w, _ := kBenchRow(typ)
			y := make([]float32, kBenchN)
			b.SetBytes(4 * kBenchN)
			for b.Loop() {
				if err := quant.Dequantize(typ, w, y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkKQuantize(b *testing.B) {
	for _, typ := range kAllTypes {
		b.Run(typ.String(), func(b *testing.B) {
			x, w, _ := kBenchRow(typ)
			b.SetBytes(4 * kBenchN)
			for b.Loop() {
				if err := quant.Quantize(typ, x, w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkKVecDot(b *testing.B) {
	for _, typ := range kTypes {
		b.Run(typ.String(), func(b *testing.B) {
			_, w, act := kBenchRow(typ)
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				if _, err := quant.VecDot(typ, kBenchN, w, act); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
