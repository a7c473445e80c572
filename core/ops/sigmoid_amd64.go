//go:build !noasm

package ops

import "github.com/klauspost/cpuid/v2"

// sigmoid8AVX2 writes Sigmoid of src's first n (a multiple of 8) elements
// to dst, bit for bit (checked on all 2^32 arguments): Expf's main path in
// four float64 lanes with its operations in its order (no FMA, the table
// entry gathered), then the float32 1/(1+e). Lanes whose |x| reaches
// Expf's special-case range hold garbage for sigmoidSlice to redo.
//
//go:noescape
func sigmoid8AVX2(dst, src *float32, n int)

func init() {
	if cpuid.CPU.Supports(cpuid.AVX2) {
		sigmoid8 = func(dst, src []float32) int {
			n := len(src) &^ 7
			if n > 0 {
				sigmoid8AVX2(&dst[0], &src[0], n)
			}
			return n
		}
	}
}
