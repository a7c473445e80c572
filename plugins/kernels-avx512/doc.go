// Package kernelsavx512 implements the Kernels contract for AVX-512 CPUs
// (F/BW/VL, VNNI where present).
//
// Its kernels are Go assembly generated with avo by tools/asmgen (the .s
// is committed; `go generate ./plugins/kernels-avx512/` regenerates it, see
// gen.go). Levels:
//
//   - "avx512": 512-bit vectors, AVX-512 F/BW/VL;
//   - "vnni": the same with VPDPWSSD/VPDPBUSD (AVX512_VNNI);
//   - "vnni256": VNNI on 256-bit vectors (EVEX, 32 registers), the default
//     on Zen 4, which executes 512-bit operations as two halves.
//
// Every kernel has core/quant's pure-Go reference as fallback and test
// oracle: on a CPU without AVX-512, or when built with the noasm tag, every
// call runs the reference ("generic"). The API and its guarantees are
// plugins/kernels-avx2's, both being plugins/internal/kernelkit's; see
// there.
package kernelsavx512
