//go:build !noasm

package kernelsavx512

import (
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
)

// TestCascadeLakeKernels runs the exactness tests on the kernels a CPU with
// AVX-512 VNNI but neither VBMI nor GFNI gets (shift-and-merge Q2_K,
// VPERMD+VPSHUFB Q3_K/Q6_K, the 512-bit AVX-512 Q4_K/Q5_K): a CPU that
// has them takes other kernels, and would otherwise never run these.
func TestCascadeLakeKernels(t *testing.T) {
	if !cpu.vnni {
		t.Skip("the CPU has no AVX-512 VNNI")
	}
	k := kernelkit.New("cascadelake")
	addLevels(k, cascadeLake)
	for name, test := range map[string]func(*testing.T, *kernelkit.Kit){
		"DotRandom": kerneltest.DotRandom, "DotIntegerExact": kerneltest.DotIntegerExact,
		"DotEdges": kerneltest.DotEdges, "MatMul": kerneltest.MatMul, "RowLengths": kerneltest.RowLengths,
	} {
		t.Run(name, func(t *testing.T) { test(t, k) })
	}
}
