package ops

import "github.com/k3-inference/k3/core/quant"

// halfAcc is one row's step of the half-precision accumulator of
// attendHalfRange: acc = half(half(acc·ms) + v·vs) for every element, the
// values of acc being halves kept as float32 and v a row of the cache.
// With ms = 1 the first rounding changes nothing (acc holds halves) and is
// skipped. An assembly version replaces it where the CPU has F16C.
var halfAcc = halfAccGo

func halfAccGo(acc []float32, v []uint16, ms, vs float32) {
	v = v[:len(acc)]
	if ms != 1 {
		for d, h := range v {
			a := quant.RoundFP16(acc[d] * ms)
			acc[d] = quant.RoundFP16(a + float32(quant.FP16ToFP32(h)*vs))
		}
		return
	}
	for d, h := range v {
		acc[d] = quant.RoundFP16(acc[d] + float32(quant.FP16ToFP32(h)*vs))
	}
}
