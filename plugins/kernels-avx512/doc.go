// Package kernelsavx512 implements the Kernels contract for AVX-512 CPUs
// (F/BW/VL, VNNI where present).
//
// Its kernels are Go assembly generated with avo by tools/asmgen (the .s
// is committed; see gen.go for the command), in two levels: "avx512"
// (512-bit vectors, AVX-512 F/BW/VL) and "vnni" (the same with VPDPWSSD
// replacing VPMADDWD+VPADDD in the K-quant kernels). Every kernel has
// core/quant's pure-Go reference as fallback and test oracle: on a CPU
// without AVX-512, or when built with the noasm tag, every call runs the
// reference.
//
// The API (QuantizeActivation, Dot, MatVec, MatMul, levels) is the same
// as plugins/kernels-avx2's; see there.
package kernelsavx512

// errPrefix starts every error of the package.
const errPrefix = "kernelsavx512"
