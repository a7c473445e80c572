//go:build !noasm

package kernelsavx512

import (
	"github.com/k3-inference/k3/core/quant"
	"github.com/klauspost/cpuid/v2"
)

// hasAVX512 is what the 512-bit kernels need; the activation quantizer and
// a few block helpers are AVX2+FMA+F16C code, which such CPUs also have.
var (
	hasAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL,
		cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	hasVNNI = hasAVX512 && cpuid.CPU.Supports(cpuid.AVX512VNNI)
)

// preferred is the default level. Zen 4 executes 512-bit operations as two
// 256-bit halves, so there the 256-bit VNNI kernels (fewer shuffles and
// broadcasts) are the fastest (measured: BenchmarkDot); Intel cores and
// later AMD ones have full-width units and get the 512-bit kernels.
func preferred() string {
	if hasVNNI {
		if cpuid.CPU.VendorID == cpuid.AMD && cpuid.CPU.Family < 0x1a {
			return "vnni256"
		}
		return "vnni"
	}
	return levels[len(levels)-1].name
}

func init() {
	defer func() {
		if err := SetLevel(preferred()); err != nil {
			panic(err) // unreachable: preferred names a level added below
		}
	}()
	if hasAVX512 {
		levels = append(levels, &level{
			name: "avx512",
			dot: map[quant.Type]dotFunc{
				quant.Q2_K:  kquant(dotQ2KAVX512, 84),
				quant.Q3_K:  kquant(dotQ3KAVX512, 110),
				quant.Q4_K:  kquant(dotQ4KAVX512, 144),
				quant.Q5_K:  kquant(dotQ5KAVX512, 176),
				quant.Q6_K:  kquant(dotQ6KAVX512, 210),
				quant.Q8_0:  block32(dotQ8_0AVX512, 34),
				quant.Q4_0:  block32(dotQ4_0AVX512, 18),
				quant.Q5_0:  block32(dotQ5_0AVX512, 22),
				quant.MXFP4: block32(dotMXFP4AVX512, 17),
				quant.F32:   float(dotF32AVX512, quant.F32, 64),
				quant.F16:   float(dotF16AVX512, quant.F16, 64),
				quant.BF16:  float(dotBF16AVX512, quant.BF16, 128),
			},
			dot4: map[quant.Type]dot4Func{
				quant.Q2_K: kquant4(dotQ2Kx4AVX512, 84),
				quant.Q3_K: kquant4(dotQ3Kx4AVX512, 110),
				quant.Q4_K: kquant4(dotQ4Kx4AVX512, 144),
				quant.Q5_K: kquant4(dotQ5Kx4AVX512, 176),
				quant.Q6_K: kquant4(dotQ6Kx4AVX512, 210),
			},
			quantizeQ8K: quantizeQ8KAVX512,
		})
	}
	if hasVNNI {
		levels = append(levels, &level{
			name: "vnni",
			dot: map[quant.Type]dotFunc{
				quant.Q2_K:  kquant(dotQ2KVNNI, 84),
				quant.Q3_K:  kquant(dotQ3KVNNI, 110),
				quant.Q4_K:  kquant(dotQ4KVNNI, 144),
				quant.Q5_K:  kquant(dotQ5KVNNI, 176),
				quant.Q6_K:  kquant(dotQ6KVNNI, 210),
				quant.Q8_0:  block32(dotQ8_0VNNI, 34),
				quant.Q4_0:  block32(dotQ4_0VNNI, 18),
				quant.Q5_0:  block32(dotQ5_0VNNI, 22),
				quant.MXFP4: block32(dotMXFP4VNNI, 17),
				quant.F32:   float(dotF32VNNI, quant.F32, 64),
				quant.F16:   float(dotF16VNNI, quant.F16, 64),
				quant.BF16:  float(dotBF16VNNI, quant.BF16, 128),
			},
			dot4: map[quant.Type]dot4Func{
				quant.Q2_K: kquant4(dotQ2Kx4VNNI, 84),
				quant.Q3_K: kquant4(dotQ3Kx4VNNI, 110),
				quant.Q4_K: kquant4(dotQ4Kx4VNNI, 144),
				quant.Q5_K: kquant4(dotQ5Kx4VNNI, 176),
				quant.Q6_K: kquant4(dotQ6Kx4VNNI, 210),
			},
			quantizeQ8K: quantizeQ8KAVX512,
		})
	}
	if hasVNNI {
		levels = append(levels, &level{
			name: "vnni256",
			dot: map[quant.Type]dotFunc{
				quant.Q2_K:  kquant(dotQ2KVNNI256, 84),
				quant.Q3_K:  kquant(dotQ3KVNNI256, 110),
				quant.Q4_K:  kquant(dotQ4KVNNI256, 144),
				quant.Q5_K:  kquant(dotQ5KVNNI256, 176),
				quant.Q6_K:  kquant(dotQ6KVNNI256, 210),
				quant.Q8_0:  block32(dotQ8_0VNNI256, 34),
				quant.Q4_0:  block32(dotQ4_0VNNI256, 18),
				quant.Q5_0:  block32(dotQ5_0VNNI256, 22),
				quant.MXFP4: block32(dotMXFP4VNNI256, 17),
				quant.F32:   float(dotF32VNNI256, quant.F32, 32),
				quant.F16:   float(dotF16VNNI256, quant.F16, 32),
				quant.BF16:  float(dotBF16VNNI256, quant.BF16, 64),
			},
			dot4: map[quant.Type]dot4Func{
				quant.Q2_K: kquant4(dotQ2Kx4VNNI256, 84),
				quant.Q3_K: kquant4(dotQ3Kx4VNNI256, 110),
				quant.Q4_K: kquant4(dotQ4Kx4VNNI256, 144),
				quant.Q5_K: kquant4(dotQ5Kx4VNNI256, 176),
				quant.Q6_K: kquant4(dotQ6Kx4VNNI256, 210),
			},
			quantizeQ8K: quantizeQ8KAVX512,
		})
	}
}
