//go:build !noasm

package kernelsavx512

import (
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
	"github.com/klauspost/cpuid/v2"
)

// cpuCaps is what of the CPU picks the kernels: detected once at start;
// tests register the kernels of CPUs with less (addLevels) to run them.
type cpuCaps struct {
	// avx512 is what the 512-bit kernels need; the activation quantizer
	// and a few block helpers are AVX2+FMA+F16C code, which such CPUs
	// also have.
	avx512 bool
	vnni   bool
	// vbmi picks the Q3_K/Q6_K kernels that permute with one VPERMB.
	vbmi bool
	// vbmiQ3: the 256-bit VBMI Q3_K kernels also use GFNI for the high
	// bits; the VBMI Q3_K kernels are taken only with both. So are the
	// 256-bit prepared q36 Q6_K kernels (GFNI quants).
	vbmiQ3 bool
	// vbmiGFNI: the VNNI levels' Q4_K and Q5_K kernels permute bytes with
	// VPERMB and split nibbles with GFNI; a VNNI CPU without them (Cascade
	// Lake) gets the 512-bit AVX-512 ones, which are as exact.
	vbmiGFNI bool
	// gfni: the VNNI levels' Q2_K kernels make their table indices with
	// one GFNI affine map per vector (q2l*); a VNNI CPU without GFNI
	// (Cascade Lake) keeps the shift-and-merge ones, which are as exact.
	gfni bool
	// halfWidth: the core runs 512-bit operations as two 256-bit halves
	// (Zen 4). Elsewhere the 256-bit level keeps the 512-bit exact float
	// kernels, which are faster there (measured, see preferred).
	halfWidth bool
}

var cpu = detect()

func detect() cpuCaps {
	var c cpuCaps
	c.avx512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	c.vnni = c.avx512 && cpuid.CPU.Supports(cpuid.AVX512VNNI)
	c.vbmi = c.vnni && cpuid.CPU.Supports(cpuid.AVX512VBMI)
	c.vbmiQ3 = c.vbmi && cpuid.CPU.Supports(cpuid.GFNI)
	c.vbmiGFNI = cpuid.CPU.Supports(cpuid.AVX512VBMI, cpuid.GFNI)
	c.gfni = cpuid.CPU.Supports(cpuid.GFNI)
	c.halfWidth = cpuid.CPU.VendorID == cpuid.AMD && cpuid.CPU.Family < 0x1a
	return c
}

// cascadeLake is a CPU with AVX-512 and VNNI but neither VBMI nor GFNI.
var cascadeLake = cpuCaps{avx512: true, vnni: true}

// preferred is the default level. The 256-bit VNNI level is the fastest
// wherever its K-quant kernels have what they need (VBMI and GFNI: the
// q2l, q36 and q4v kernels), measured with BenchmarkSideBySide at 1
// thread against the 512-bit level: on Zen 4, which executes 512-bit
// operations as two halves, and on a Sapphire Rapids-class Xeon with
// full-width units (4096², GB/s vnni256 / vnni: Q2_K 14.9/12.8, Q3_K
// 11.9/9.8, Q4_K 21.9/14.8, Q5_K 19.4/14.6, Q6_K 24.3/20.6; Q8_0 and the
// 32-blocks equal) — the K-quant loops are bound by shuffles, which do
// not get wider. Without VBMI/GFNI the 512-bit level stays the choice
// off Zen 4.
func preferred() string {
	switch {
	case !cpu.vnni:
		return "avx512"
	case cpu.vbmiQ3, cpu.halfWidth:
		return "vnni256"
	}
	return "vnni"
}

func init() {
	addLevels(kit, cpu)
	if cpu.avx512 {
		if err := kit.SetLevel(preferred()); err != nil {
			panic(err) // unreachable: preferred names a level added above
		}
	}
}

// addLevels adds to k the levels a CPU with c runs, each with the kernels
// for what c has.
func addLevels(k *kernelkit.Kit, c cpuCaps) {
	if !c.avx512 {
		return
	}
	k.Add("avx512", kernelkit.Funcs{
		Q2K: dotQ2KAVX512, Q3K: dotQ3KAVX512, Q4K: dotQ4KAVX512, Q5K: dotQ5KAVX512, Q6K: dotQ6KAVX512,
		Q2Kx2: dotQ2Kx2AVX512, Q2Kx3: dotQ2Kx3AVX512,
		Q2Kx4: dotQ2Kx4AVX512, Q3Kx4: dotQ3Kx4AVX512, Q4Kx4: dotQ4Kx4AVX512, Q5Kx4: dotQ5Kx4AVX512, Q6Kx4: dotQ6Kx4AVX512,
		Q3KP: dotQ3KPAVX512, Q6KP: dotQ6KPAVX512, Q3KPT: lrDotQ3KPTAVX512, Q6KPT: lrDotQ6KPTAVX512, Q4KP: dotQ4KPAVX512, Q5KP: dotQ5KPAVX512, Q4KPT: dotQ4KPTAVX512, Q5KPT: dotQ5KPTAVX512, PrepQ8K: q63PrepQ8KVNNI256,
		Q4Kx4P: dotQ4Kx4PAVX512, Q5Kx4P: dotQ5Kx4PAVX512, PrepQ45: q4mmPrepQ8KVNNI256,
		Q8_0: dotQ8_0AVX512, Q4_0: dotQ4_0AVX512, Q5_0: dotQ5_0AVX512, MXFP4: dotMXFP4AVX512,
		Q8_0r8: dotQ8_0r8AVX512, Q4_0r8: dotQ4_0r8AVX512, Q5_0r8: dotQ5_0r8AVX512, MXFP4r8: dotMXFP4r8AVX512,
		IQ4NL: dotIQ4_NLAVX512, IQ4NLr8: dotIQ4_NLr8AVX512, IQ4XS: dotIQ4_XSAVX512, IQ4XSr8: dotIQ4_XSr8AVX512, TQ1: dotTQ1_0AVX512, TQ2: tqb4DotTQ2_0AVX512, TQ1x4: dotTQ1_0x4AVX512, TQ2x4: dotTQ2_0x4AVX512,
		IQ2XXS: dotIQ2_XXSAVX512, IQ2XS: dotIQ2_XSAVX512, IQ2S: dotIQ2_SAVX512,
		IQ2XXSx4: dotIQ2_XXSx4AVX512, IQ2XSx4: dotIQ2_XSx4AVX512, IQ2Sx4: dotIQ2_Sx4AVX512,
		IQ3XXS: dotIQ3_XXSAVX512, IQ3S: dotIQ3_SAVX512, IQ1S: dotIQ1_SAVX512, IQ1M: dotIQ1_MAVX512,
		IQ3XXSx4: dotIQ3_XXSx4AVX512, IQ3Sx4: dotIQ3_Sx4AVX512, IQ1Sx4: dotIQ1_Sx4AVX512, IQ1Mx4: dotIQ1_Mx4AVX512,
		Q4_1: dotQ4_1AVX512, Q5_1: dotQ5_1AVX512, Q4_1r8: dotQ4_1r8AVX512, Q5_1r8: dotQ5_1r8AVX512,
		F32: dotF32AVX512, F16: dotF16AVX512, BF16: dotBF16AVX512, FloatRows: 4,
		F32Seq: dotSeqF32AVX512, F16Seq: dotSeqF16AVX512, BF16Seq: dotSeqBF16AVX512,
		FastF32: dotFastF32AVX512, FastF16: dotFastF16AVX512, FastBF16: dotFastBF16AVX512, FastRows: 4,
		PrepFastF16: prepFastF16AVX512,
		QuantizeQ8K: quantizeQ8KAVX512,
	})
	if c.vnni {
		q3, q3x4, q6, q6x4 := dotQ3KVNNI, dotQ3Kx4VNNI, dotQ6KVNNI, dotQ6Kx4VNNI
		q3y, q3x4y, q6y, q6x4y := dotQ3KVNNI256, dotQ3Kx4VNNI256, dotQ6KVNNI256, dotQ6Kx4VNNI256
		p3, p6 := dotQ3KPVNNI, dotQ6KPVNNI
		p3y, p6y := dotQ3KPVNNI256, dotQ6KPVNNI256
		t3, t6, t3y, t6y := lrDotQ3KPTVNNI, lrDotQ6KPTVNNI, lrDotQ3KPTVNNI256, lrDotQ6KPTVNNI256
		if c.vbmiQ3 {
			q3, q3x4, q3y, q3x4y = dotQ3KVBMIVNNI, dotQ3KVBMIx4VNNI, dotQ3KVBMIVNNI256, dotQ3KVBMIx4VNNI256
			p3, p3y, t3, t3y = dotQ3KPVBMIVNNI, q36DotQ3KPVBMIVNNI256, lrDotQ3KPVBMITVNNI, q36LrDotQ3KPVBMITVNNI256
		}
		if c.vbmi {
			q6, q6x4, q6y, q6x4y = dotQ6KVBMIVNNI, dotQ6KVBMIx4VNNI, dotQ6KVBMIVNNI256, dotQ6KVBMIx4VNNI256
			p6, p6y, t6, t6y = dotQ6KPVBMIVNNI, dotQ6KPVBMIVNNI256, lrDotQ6KPVBMITVNNI, lrDotQ6KPVBMITVNNI256
		}
		// The tile kernels of several rows are q36 ones only (VBMI and
		// GFNI).
		var xt3y, xt6y [3]func(w, a *byte, nb, astride int, acc *float32, pf *byte)
		if c.vbmiQ3 {
			// The q36 Q6_K kernels also need GFNI (their quants).
			p6y, t6y = q36DotQ6KPVBMIVNNI256, q36LrDotQ6KPVBMITVNNI256
			xt3y = [3]func(w, a *byte, nb, astride int, acc *float32, pf *byte){q36LrDotQ3KPVBMIx2TVNNI256, q36LrDotQ3KPVBMIx3TVNNI256, q36LrDotQ3KPVBMIx4TVNNI256}
			xt6y = [3]func(w, a *byte, nb, astride int, acc *float32, pf *byte){q36LrDotQ6KPVBMIx2TVNNI256, q36LrDotQ6KPVBMIx3TVNNI256, q36LrDotQ6KPVBMIx4TVNNI256}
		}
		q2, q2x4, q2y, q2x4y := dotQ2KVNNI, dotQ2Kx4VNNI, dotQ2KVNNI256, dotQ2Kx4VNNI256
		q2x2, q2x3, q2x2y, q2x3y := dotQ2Kx2VNNI, dotQ2Kx3VNNI, dotQ2Kx2VNNI256, dotQ2Kx3VNNI256
		if c.gfni {
			q2, q2x4, q2y, q2x4y = q2lDotQ2KVNNI, q2lDotQ2Kx4VNNI, q2lDotQ2KVNNI256, q2lDotQ2Kx4VNNI256
			q2x2, q2x3, q2x2y, q2x3y = q2lDotQ2Kx2VNNI, q2lDotQ2Kx3VNNI, q2lDotQ2Kx2VNNI256, q2lDotQ2Kx3VNNI256
		}
		q4, q5, q4x4, q5x4 := dotQ4KVNNI, dotQ5KVNNI, dotQ4Kx4VNNI, dotQ5Kx4VNNI
		q4y, q5y, q4x4y, q5x4y := dotQ4KVNNI256, dotQ5KVNNI256, dotQ4Kx4VNNI256, dotQ5Kx4VNNI256
		// The 256-bit prepared one-row kernels are the q4v ones
		// (tools/asmgen/q4v.go; the same bits as dotQ4KPVNNI256 and the
		// rest, TestQ4VExact).
		p4, p5, p4y, p5y := dotQ4KPVNNI, dotQ5KPVNNI, q4vDotQ4KPVNNI256, q4vDotQ5KPVNNI256
		t4, t5, t4y, t5y := dotQ4KPTVNNI, dotQ5KPTVNNI, q4vDotQ4KPTVNNI256, q4vDotQ5KPTVNNI256
		m4, m5, m4y, m5y := dotQ4Kx4PVNNI, dotQ5Kx4PVNNI, dotQ4Kx4PVNNI256, dotQ5Kx4PVNNI256
		if !c.vbmiGFNI {
			q4, q5, q4x4, q5x4 = dotQ4KAVX512, dotQ5KAVX512, dotQ4Kx4AVX512, dotQ5Kx4AVX512
			q4y, q5y, q4x4y, q5x4y = q4, q5, q4x4, q5x4
			p4, p5 = dotQ4KPAVX512, dotQ5KPAVX512
			p4y, p5y = p4, p5
			t4, t5 = dotQ4KPTAVX512, dotQ5KPTAVX512
			t4y, t5y = t4, t5
			m4, m5 = dotQ4Kx4PAVX512, dotQ5Kx4PAVX512
			m4y, m5y = m4, m5
		}
		k.Add("vnni", kernelkit.Funcs{
			Q2K: q2, Q3K: q3, Q4K: q4, Q5K: q5, Q6K: q6,
			Q2Kx2: q2x2, Q2Kx3: q2x3,
			Q2Kx4: q2x4, Q3Kx4: q3x4, Q4Kx4: q4x4, Q5Kx4: q5x4, Q6Kx4: q6x4,
			Q3KP: p3, Q6KP: p6, Q3KPT: t3, Q6KPT: t6, Q4KP: p4, Q5KP: p5, Q4KPT: t4, Q5KPT: t5, PrepQ8K: q63PrepQ8KVNNI256,
			Q4Kx4P: m4, Q5Kx4P: m5, PrepQ45: q4mmPrepQ8KVNNI256,
			Q8_0: dotQ8_0VNNI, Q4_0: dotQ4_0VNNI, Q5_0: dotQ5_0VNNI, MXFP4: dotMXFP4VNNI,
			Q8_0r8: dotQ8_0r8VNNI, Q4_0r8: dotQ4_0r8VNNI, Q5_0r8: dotQ5_0r8VNNI, MXFP4r8: dotMXFP4r8VNNI,
			IQ4NL: dotIQ4_NLVNNI, IQ4NLr8: dotIQ4_NLr8VNNI, IQ4XS: dotIQ4_XSVNNI, IQ4XSr8: dotIQ4_XSr8VNNI, TQ1: dotTQ1_0VNNI, TQ2: tqb4DotTQ2_0VNNI, TQ1x4: dotTQ1_0x4VNNI, TQ2x4: dotTQ2_0x4VNNI,
			IQ2XXS: dotIQ2_XXSVNNI256, IQ2XS: dotIQ2_XSVNNI256, IQ2S: dotIQ2_SVNNI256,
			IQ2XXSx4: dotIQ2_XXSx4VNNI256, IQ2XSx4: dotIQ2_XSx4VNNI256, IQ2Sx4: dotIQ2_Sx4VNNI256,
			IQ3XXS: dotIQ3_XXSVNNI, IQ3S: dotIQ3_SVNNI, IQ1S: dotIQ1_SVNNI, IQ1M: dotIQ1_MVNNI,
			IQ3XXSx4: dotIQ3_XXSx4VNNI, IQ3Sx4: dotIQ3_Sx4VNNI, IQ1Sx4: dotIQ1_Sx4VNNI, IQ1Mx4: dotIQ1_Mx4VNNI,
			Q4_1: dotQ4_1VNNI, Q5_1: dotQ5_1VNNI, Q4_1r8: dotQ4_1r8VNNI, Q5_1r8: dotQ5_1r8VNNI,
			F32: dotF32VNNI, F16: dotF16VNNI, BF16: dotBF16VNNI, FloatRows: 4,
			F32Seq: dotSeqF32VNNI, F16Seq: dotSeqF16VNNI, BF16Seq: dotSeqBF16VNNI,
			FastF32: dotFastF32AVX512, FastF16: dotFastF16AVX512, FastBF16: dotFastBF16AVX512, FastRows: 4,
			PrepFastF16: prepFastF16AVX512,
			QuantizeQ8K: quantizeQ8KAVX512,
		})
		// The exact float kernels: 256-bit ones on Zen 4; elsewhere the
		// 512-bit ones (on the Xeon, 4096² GB/s 512/256-bit: F32
		// 23.6/21.6, F16 13.7/11.2, BF16 14.0/11.5).
		f32y, f16y, bf16y := dotF32VNNI256, dotF16VNNI256, dotBF16VNNI256
		f32sy, f16sy, bf16sy := dotSeqF32VNNI256, dotSeqF16VNNI256, dotSeqBF16VNNI256
		if !c.halfWidth {
			f32y, f16y, bf16y = dotF32VNNI, dotF16VNNI, dotBF16VNNI
			f32sy, f16sy, bf16sy = dotSeqF32VNNI, dotSeqF16VNNI, dotSeqBF16VNNI
		}
		// The four-row K-quant kernels: 512-bit ones where the CPU has
		// full-width units. Four activation rows share each unpacked
		// weight vector, so the loops are bound by the VPDPBUSDs, which
		// do get wider (Turin-class Zen 5, 7168-wide rows, 1 thread,
		// best-of per activation row, 512/256-bit: Q2_K 177/214 us,
		// Q3_K 203/319, Q4_K 197/229, Q5_K 232/263, Q6_K 282/404;
		// TestLevelTable). One-row kernels stay 256-bit (Q2_K 298/252,
		// Q3_K 579/467).
		if !c.halfWidth {
			q2x4y, q3x4y, q4x4y, q5x4y, q6x4y = q2x4, q3x4, q4x4, q5x4, q6x4
			m4y, m5y = m4, m5
		}
		k.Add("vnni256", kernelkit.Funcs{
			Q2K: q2y, Q3K: q3y, Q4K: q4y, Q5K: q5y, Q6K: q6y,
			Q2Kx2: q2x2y, Q2Kx3: q2x3y,
			Q2Kx4: q2x4y, Q3Kx4: q3x4y, Q4Kx4: q4x4y, Q5Kx4: q5x4y, Q6Kx4: q6x4y,
			Q3KP: p3y, Q6KP: p6y, Q3KPT: t3y, Q6KPT: t6y, Q4KP: p4y, Q5KP: p5y, Q4KPT: t4y, Q5KPT: t5y, PrepQ8K: q63PrepQ8KVNNI256,
			Q3KxPT: xt3y, Q6KxPT: xt6y,
			Q4Kx4P: m4y, Q5Kx4P: m5y, PrepQ45: q4mmPrepQ8KVNNI256,
			Q8_0: dotQ8_0VNNI256, Q4_0: dotQ4_0VNNI256, Q5_0: dotQ5_0VNNI256, MXFP4: dotMXFP4VNNI256,
			Q8_0r8: dotQ8_0r8VNNI256, Q4_0r8: dotQ4_0r8VNNI256, Q5_0r8: dotQ5_0r8VNNI256, MXFP4r8: dotMXFP4r8VNNI256,
			IQ4NL: dotIQ4_NLVNNI256, IQ4NLr8: dotIQ4_NLr8VNNI256, IQ4XS: dotIQ4_XSVNNI256, IQ4XSr8: dotIQ4_XSr8VNNI256,
			// TQ1_0 and TQ2_0 on 512-bit vectors (both halves of a block, or
			// two trits, per vector) halve their instructions, which bound
			// them: on Zen 4 (BenchmarkSideBySide, 4096², 1 thread) 45% and
			// 12% faster than 256-bit ones.
			TQ1: dotTQ1_0VNNI, TQ2: tqb4DotTQ2_0VNNI, TQ1x4: dotTQ1_0x4VNNI, TQ2x4: dotTQ2_0x4VNNI,
			IQ2XXS: dotIQ2_XXSVNNI256, IQ2XS: dotIQ2_XSVNNI256, IQ2S: dotIQ2_SVNNI256,
			IQ2XXSx4: dotIQ2_XXSx4VNNI256, IQ2XSx4: dotIQ2_XSx4VNNI256, IQ2Sx4: dotIQ2_Sx4VNNI256,
			IQ3XXS: dotIQ3_XXSVNNI256, IQ3S: dotIQ3_SVNNI256, IQ1S: dotIQ1_SVNNI256, IQ1M: dotIQ1_MVNNI256,
			IQ3XXSx4: dotIQ3_XXSx4VNNI256, IQ3Sx4: dotIQ3_Sx4VNNI256, IQ1Sx4: dotIQ1_Sx4VNNI256, IQ1Mx4: dotIQ1_Mx4VNNI256,
			Q4_1: dotQ4_1VNNI256, Q5_1: dotQ5_1VNNI256, Q4_1r8: dotQ4_1r8VNNI256, Q5_1r8: dotQ5_1r8VNNI256,
			F32: f32y, F16: f16y, BF16: bf16y, FloatRows: 4,
			F32Seq: f32sy, F16Seq: f16sy, BF16Seq: bf16sy,
			// The fast float kernels are the 512-bit ones (the same
			// order, so the same bits; asmgen emits no 256-bit EVEX
			// ones): on Zen 4 they stream F16/BF16 rows 5-15% faster
			// than 256-bit ones did.
			FastF32: dotFastF32AVX512, FastF16: dotFastF16AVX512, FastBF16: dotFastBF16AVX512, FastRows: 4,
			PrepFastF16: prepFastF16AVX512,
			QuantizeQ8K: quantizeQ8KAVX512,
		})
	}
}
