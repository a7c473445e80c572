package kerneltest

import "math"

// Every kernel returns exactly what core/quant's reference returns — which
// is ggml's scalar code, bit for bit — so that every level (and llama.cpp's
// own reference build) gives the same logits and the same greedy tokens.
// A kernel reaches that by keeping the reference's integer partial sums
// (the same grouping of elements into lanes, in any order: integers add
// exactly) and doing the reference's float operations in the reference's
// order (no fused multiply-adds where it rounds twice); the plain-float
// kernels sum in another order and prove the rounding is the reference's
// (kernelkit/exactfloat.go).

// sameFloat is bit equality, with any NaN equal to any NaN (ggml's and
// Go's NaN payloads differ).
func sameFloat(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}
