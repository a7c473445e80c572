//go:build !noasm

package kernelsavx2

import (
	"github.com/k3-inference/k3/core/quant"
	"github.com/klauspost/cpuid/v2"
)

// hasAVX2 is what the assembly needs: AVX2 integer ops, FMA and F16C's
// half-precision conversions.
var hasAVX2 = cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3, cpuid.F16C)

func init() {
	if !hasAVX2 {
		return
	}
	defer func() { active = levels[len(levels)-1] }()
	levels = append(levels, &level{
		name: "avx2",
		dot: map[quant.Type]dotFunc{
			quant.Q2_K:  kquant(dotQ2KAVX2, 84),
			quant.Q3_K:  kquant(dotQ3KAVX2, 110),
			quant.Q4_K:  kquant(dotQ4KAVX2, 144),
			quant.Q5_K:  kquant(dotQ5KAVX2, 176),
			quant.Q6_K:  kquant(dotQ6KAVX2, 210),
			quant.Q8_0:  block32(dotQ8_0AVX2, 34),
			quant.Q4_0:  block32(dotQ4_0AVX2, 18),
			quant.Q5_0:  block32(dotQ5_0AVX2, 22),
			quant.MXFP4: block32(dotMXFP4AVX2, 17),
			quant.F32:   float(dotF32AVX2, quant.F32, 32),
			quant.F16:   float(dotF16AVX2, quant.F16, 32),
			quant.BF16:  float(dotBF16AVX2, quant.BF16, 64),
		},
		dot4: map[quant.Type]dot4Func{
			quant.Q2_K: kquant4(dotQ2Kx4AVX2, 84),
			quant.Q3_K: kquant4(dotQ3Kx4AVX2, 110),
			quant.Q4_K: kquant4(dotQ4Kx4AVX2, 144),
			quant.Q5_K: kquant4(dotQ5Kx4AVX2, 176),
			quant.Q6_K: kquant4(dotQ6Kx4AVX2, 210),
		},
		quantizeQ8K: quantizeQ8KAVX2,
	})
}
