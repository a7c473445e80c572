package kerneltest

import (
	"math"

	"github.com/k3-inference/k3/core/quant"
)

// Every kernel is meant to return exactly what core/quant's reference
// returns — which is ggml's scalar code, bit for bit — so that every level
// (and llama.cpp's own reference build) gives the same logits and the same
// greedy tokens. A kernel reaches that by keeping the reference's integer
// partial sums (the same grouping of elements into lanes, in any order:
// integers add exactly) and doing the reference's float operations in the
// reference's order (no fused multiply-adds where it rounds twice).
//
// notExact lists the types whose kernels do not do so yet: for them
// checkDot accepts 1e-6 of the sum of |terms|; for every other type it
// demands the reference's float bit for bit.
var notExact = map[quant.Type]bool{
	quant.Q3_K:  true,
	quant.Q4_K:  true,
	quant.Q5_K:  true,
	quant.Q6_K:  true,
	quant.Q8_0:  true,
	quant.Q4_0:  true,
	quant.Q5_0:  true,
	quant.MXFP4: true,
	quant.F32:   true,
	quant.F16:   true,
	quant.BF16:  true,
}

// sameFloat is bit equality, with any NaN equal to any NaN (ggml's and
// Go's NaN payloads differ).
func sameFloat(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}
