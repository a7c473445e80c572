//go:build !noasm

package kernelsavx2

import (
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
	"github.com/klauspost/cpuid/v2"
)

// hasAVX2 is what the assembly needs: AVX2 integer ops, FMA and F16C's
// half-precision conversions.
var hasAVX2 = cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3, cpuid.F16C)

// hasBMI2 picks the grid kernels whose indices PDEP and BEXTR make
// (IQ2_S, IQ3_S, IQ1_S, IQ1_M; tools/asmgen/gridload.go): on Intel and on
// AMD from Zen 3, where PDEP is one fast instruction (Zen 1 and 2, Hygon
// included, run it in microcode). Zen 5, 4096² MatVec, 1 thread, best of
// ~600, without/with BMI2: IQ2_S 1.00/0.85 ms, IQ3_S 1.81/1.33, IQ1_S
// 0.85/0.70, IQ1_M 0.94/0.77.
var hasBMI2 = cpuid.CPU.Supports(cpuid.BMI1, cpuid.BMI2) &&
	(cpuid.CPU.VendorID == cpuid.Intel || cpuid.CPU.VendorID == cpuid.AMD && cpuid.CPU.Family >= 0x19)

func init() {
	if hasAVX2 {
		addLevel(kit, hasBMI2)
	}
}

// addLevel adds the avx2 level to k, with the BMI2 grid kernels or not.
func addLevel(k *kernelkit.Kit, bmi2 bool) {
	f := kernelkit.Funcs{
		Q2K: dotQ2KAVX2, Q3K: dotQ3KAVX2, Q4K: dotQ4KAVX2, Q5K: dotQ5KAVX2, Q6K: dotQ6KAVX2,
		Q2Kx2: dotQ2Kx2AVX2, Q2Kx3: dotQ2Kx3AVX2,
		Q2Kx4: dotQ2Kx4AVX2, Q3Kx4: dotQ3Kx4AVX2, Q4Kx4: dotQ4Kx4AVX2, Q5Kx4: dotQ5Kx4AVX2, Q6Kx4: dotQ6Kx4AVX2,
		Q3KP: dotQ3KPAVX2, Q6KP: dotQ6KPAVX2, Q3KPT: lrDotQ3KPTAVX2, Q6KPT: lrDotQ6KPTAVX2, Q4KP: dotQ4KPAVX2, Q5KP: dotQ5KPAVX2, Q4KPT: dotQ4KPTAVX2, Q5KPT: dotQ5KPTAVX2, PrepQ8K: q63PrepQ8KAVX2,
		Q4Kx4P: dotQ4Kx4PAVX2, Q5Kx4P: dotQ5Kx4PAVX2, PrepQ45: q4mmPrepQ8KAVX2,
		Q8_0: dotQ8_0AVX2, Q4_0: dotQ4_0AVX2, Q5_0: dotQ5_0AVX2, MXFP4: dotMXFP4AVX2,
		Q8_0r8: dotQ8_0r8AVX2, Q4_0r8: dotQ4_0r8AVX2, Q5_0r8: dotQ5_0r8AVX2, MXFP4r8: dotMXFP4r8AVX2,
		IQ4NL: dotIQ4_NLAVX2, IQ4NLr8: dotIQ4_NLr8AVX2, IQ4XS: dotIQ4_XSAVX2, IQ4XSr8: dotIQ4_XSr8AVX2, TQ1: dotTQ1_0AVX2, TQ2: tqb4DotTQ2_0AVX2, TQ1x4: dotTQ1_0x4AVX2, TQ2x4: dotTQ2_0x4AVX2,
		IQ2XXS: dotIQ2_XXSAVX2, IQ2XS: dotIQ2_XSAVX2, IQ2S: dotIQ2_SAVX2,
		IQ2XXSx4: dotIQ2_XXSx4AVX2, IQ2XSx4: dotIQ2_XSx4AVX2, IQ2Sx4: dotIQ2_Sx4AVX2,
		IQ3XXS: dotIQ3_XXSAVX2, IQ3S: dotIQ3_SAVX2, IQ1S: dotIQ1_SAVX2, IQ1M: dotIQ1_MAVX2,
		IQ3XXSx4: dotIQ3_XXSx4AVX2, IQ3Sx4: dotIQ3_Sx4AVX2, IQ1Sx4: dotIQ1_Sx4AVX2, IQ1Mx4: dotIQ1_Mx4AVX2,
		Q4_1: dotQ4_1AVX2, Q5_1: dotQ5_1AVX2, Q4_1r8: dotQ4_1r8AVX2, Q5_1r8: dotQ5_1r8AVX2,
		F32: dotF32AVX2, F16: dotF16AVX2, BF16: dotBF16AVX2, FloatRows: 1,
		F32Seq: dotSeqF32AVX2, F16Seq: dotSeqF16AVX2, BF16Seq: dotSeqBF16AVX2,
		FastF32: dotFastF32AVX2, FastF16: dotFastF16AVX2, FastBF16: dotFastBF16AVX2, FastRows: 1,
		PrepFastF16: prepFastF16AVX2,
		QuantizeQ8K: quantizeQ8KAVX2,
	}
	if bmi2 {
		f.IQ2S, f.IQ3S, f.IQ1S, f.IQ1M = dotIQ2_SAVX2BMI2, dotIQ3_SAVX2BMI2, dotIQ1_SAVX2BMI2, dotIQ1_MAVX2BMI2
		f.IQ2Sx4, f.IQ3Sx4, f.IQ1Sx4, f.IQ1Mx4 = dotIQ2_Sx4AVX2BMI2, dotIQ3_Sx4AVX2BMI2, dotIQ1_Sx4AVX2BMI2, dotIQ1_Mx4AVX2BMI2
	}
	k.Add("avx2", f)
}
