// Package kernelsavx2 implements the Kernels contract for AVX2+FMA CPUs.
//
// Its kernels are Go assembly generated with avo by tools/asmgen (the .s
// is committed; `go generate ./plugins/kernels-avx2/` regenerates it, see
// gen.go). Every kernel has core/quant's pure-Go reference as fallback and
// test oracle: on a CPU without AVX2, FMA and F16C, or when built with the
// noasm tag, every call runs the reference ("generic" level).
//
// The API is what the Kernels plugin wraps:
//
//   - QuantizeActivation quantizes an f32 activation row to a weight type's
//     vec-dot type (Q8_K for the K-quants, Q8_0 for the 32-element types,
//     Q8_1 for Q4_1 and Q5_1, F16/BF16/F32 for the float types), byte for
//     byte as quant.Quantize.
//   - Dot is one weight row times one quantized activation row.
//   - MatVec multiplies rows weight rows by one activation row (decode),
//     eight weight rows per kernel call for the 32-element block types and
//     IQ4_XS;
//     MatMul by several (prefill), tiling the weights so that they stream
//     from memory once per batch and, for the K-quants, TQ1_0 and TQ2_0,
//     unpacking each weight block once for four activation rows (the
//     32-element types and IQ4_XS run eight weight rows per activation
//     row instead: their per-32-element sums and float steps, which every
//     activation row needs, cost more than their unpacking). Both hand
//     out chunks of whole 64-byte output lines to persistent workers
//     (core/parallel).
//   - Levels, Level and SetLevel name and switch the instruction-set path;
//     SetFloatMode and FloatMode the F32/F16/BF16 arithmetic (exact or fast).
//
// Results are quant.VecDot's bit for bit — which is ggml's scalar code, so
// every level, the reference and llama.cpp's reference CPU build compute
// the same logits and the same greedy tokens. The kernels keep the
// reference's integer partial sums (its grouping of elements into lanes,
// e.g. the K-quants' eight lanes of index mod 8, reached by permuting each
// 32-element run) and do its float operations in its order without fused
// multiply-adds; the plain-float kernels sum in float64 in another order
// and prove the float32 rounding is the reference's, or run the
// reference's sequential sum when it might not be (kernelkit/exactfloat.go).
// Float mode fast (SetFloatMode, a profile's kernels.float, the plugin's
// MatMul.FastFloat) trades that for speed on F32, F16 and BF16 weights only: a
// fixed float32-lane order, the same bits on every level, within 2^-21 of
// Σ|products| of the reference (kernelkit/fastfloat.go). One precondition: Q8_0·Q8_0
// uses ggml's sign trick, exact for activation bytes in [-127, 127], which
// is all QuantizeActivation produces; a hand-made -128 activation would be
// taken as +128 where the weight is negative.
//
// Covered types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (against Q8_K; the
// IQ2, IQ3 and IQ1 ones also for four activation rows at a time), Q8_0, Q4_0, Q5_0, MXFP4, IQ4_NL
// (against Q8_0), Q4_1, Q5_1 (against Q8_1), F32, F16, BF16; the others
// Types lists run on the reference. IQ4_NL and IQ4_XS need no
// precondition: their table values are never -128, so their sign trick
// moves the sign onto the weight; the IQ2 and IQ3 kernels take |q8| as
// the unsigned side too. The IQ1 kernels (and TQ1_0, TQ2_0) take the Q8_K
// block's bsums for exact sums of its quants, which they are in every
// Q8_K QuantizeActivation makes.
//
// The code both kernel packages share (levels, MatVec/MatMul threading, the
// plugin) is plugins/internal/kernelkit; this package brings the assembly,
// the table of its kernels (asm_amd64.go) and the API in kernels.go.
package kernelsavx2
