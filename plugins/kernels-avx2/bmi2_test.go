//go:build !noasm

package kernelsavx2

import (
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
	"github.com/klauspost/cpuid/v2"
)

// TestOtherBMI2Kernels runs the exactness tests on the grid kernels this
// CPU does not get: the shift-made indices where it has a fast BMI2, the
// PDEP ones where it has a slow one (they run, just slowly), which would
// otherwise never run here.
func TestOtherBMI2Kernels(t *testing.T) {
	if !hasAVX2 {
		t.Skip("the CPU has no AVX2")
	}
	if !hasBMI2 && !cpuid.CPU.Supports(cpuid.BMI1, cpuid.BMI2) {
		t.Skip("the CPU has no BMI2")
	}
	k := kernelkit.New("avx2-other-bmi2")
	addLevel(k, !hasBMI2)
	for name, test := range map[string]func(*testing.T, *kernelkit.Kit){
		"DotRandom": kerneltest.DotRandom, "DotIntegerExact": kerneltest.DotIntegerExact,
		"DotEdges": kerneltest.DotEdges, "MatMul": kerneltest.MatMul, "MatMulRandom": kerneltest.MatMulRandom,
		"RowLengths": kerneltest.RowLengths,
	} {
		t.Run(name, func(t *testing.T) { test(t, k) })
	}
}
