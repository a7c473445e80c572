//go:build !noasm

package ops

import "github.com/klauspost/cpuid/v2"

// tanhf8AVX2 writes Tanhf of src's first n (a multiple of 8) elements to
// dst, bit for bit (checked on all 2^32 arguments); lanes outside
// 2^-26 <= |x| < 22 hold garbage for tanhfSlice to redo. Each lane does
// tanhf's and expm1f's float32 operations in their order, no FMA, but
// without their branches, which on activations were taken at random:
//   - |x| < 1 calls expm1f(-2|x|), otherwise expm1f(2|x|); every lane
//     computes y = ±2|x| and the k of expm1f's general reduction.
//   - fdlibm's k = 0 and k = ±1 branches are its general reduction with
//     t = 0 and t = ±1 (t·ln2hi and t·ln2lo are then exact, y - (-ln2hi)
//     is y + ln2hi, y - 0 - 0 is y), so the lane overrides k by the same
//     |y| thresholds and reduces once; fdlibm's |y| < 2^-25 and
//     |y| >= 27·ln2 early returns fall outside the lanes' range.
//   - the k-dependent final steps (k = 0, -1, k < 23, k <= 56, else) are
//     all computed and picked by k, then tanhf's -t/(t+2) or 1 - 2/(t+2)
//     by |x| < 1 (one division: the numerators are picked first), and
//     the sign flipped as tanhf's -z (z > 0 here).
//
//go:noescape
func tanhf8AVX2(dst, src *float32, n int)

func init() {
	if cpuid.CPU.Supports(cpuid.AVX2) {
		tanhf8 = func(dst, src []float32) int {
			n := len(src) &^ 7
			if n > 0 {
				tanhf8AVX2(&dst[0], &src[0], n)
			}
			return n
		}
	}
}
