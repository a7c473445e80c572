// Package kernelsavx2 implements the Kernels contract for AVX2+FMA CPUs.
//
// Its kernels are Go assembly generated with avo by tools/asmgen (the .s
// is committed; see gen.go for the command). Every kernel has core/quant's
// pure-Go reference as fallback and test oracle: on a CPU without AVX2, FMA
// and F16C, or when built with the noasm tag, every call runs the reference.
//
// The API is what the Kernels plugin wraps:
//
//   - QuantizeActivation quantizes an f32 activation row to a weight type's
//     vec-dot type (Q8_K for the K-quants, Q8_0 for the 32-element types),
//     byte for byte as quant.Quantize does.
//   - Dot is one weight row times one quantized activation row.
//   - MatVec multiplies rows weight rows by one activation row (decode),
//     MatMul by several (prefill), splitting rows across goroutines.
//
// Results agree with quant.VecDot: the integer sums of every block exactly,
// the float result up to the order of the float additions.
package kernelsavx2

// errPrefix starts every error of the package.
const errPrefix = "kernelsavx2"
