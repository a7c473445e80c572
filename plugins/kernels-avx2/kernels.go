package kernelsavx2

import (
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// kit holds this package's levels: the reference, and "avx2" where
// asm_amd64.go's init finds the CPU runs it. Everything below is kit's;
// plugins/internal/kernelkit documents it.
var kit = kernelkit.New("kernelsavx2")

// LevelEnv names the environment variable that forces an instruction-set
// level (see Levels) in a kernels process.
const LevelEnv = kernelkit.LevelEnv

// Plugin implements plugin.Kernels over the arena with MatMul.
type Plugin = kernelkit.Plugin

// NewPlugin returns the kernels plugin, on the level LevelEnv names if it
// is set, else the best one this CPU runs.
func NewPlugin() *Plugin { return kit.NewPlugin() }

// Levels names the paths this CPU and build support, "generic" first.
func Levels() []string { return kit.Levels() }

// Level names the path in use.
func Level() string { return kit.Level() }

// SetLevel switches every kernel to the named path; not while kernels run.
func SetLevel(name string) error { return kit.SetLevel(name) }

// SetFloatMode selects the F32/F16/BF16 arithmetic: "exact" (the default, the
// reference's bits) or "fast" (kernelkit's fastfloat.go); not while
// kernels run. The plugin selects it per product (plugin.MatMul.FastFloat).
func SetFloatMode(mode string) error { return kit.SetFloatMode(mode) }

// FloatMode names the float mode in use.
func FloatMode() string { return kit.FloatMode() }

// Types lists the weight types Dot, MatVec and MatMul accept.
func Types() []quant.Type { return kernelkit.Types() }

// Accelerated reports whether the active path has a SIMD kernel for t.
func Accelerated(t quant.Type) bool { return kit.Accelerated(t) }

// QuantizeActivation quantizes the activation row src to t's vec-dot type
// into dst, exactly as quant.Quantize(t.VecDotType(), src, dst).
func QuantizeActivation(t quant.Type, src []float32, dst []byte) error {
	return kit.QuantizeActivation(t, src, dst)
}

// Dot returns weight row w (n elements of t) times activation row a (n
// elements of t.VecDotType()).
func Dot(t quant.Type, n int, w, a []byte) (float32, error) { return kit.Dot(t, n, w, a) }

// MatVec computes out[i] = w_i · act for rows weight rows on threads
// goroutines.
func MatVec(t quant.Type, w []byte, rows, n int, act []byte, out []float32, threads int) error {
	return kit.MatVec(t, w, rows, n, act, out, threads)
}

// MatMul computes out[j*rows+i] = w_i · act_j for m activation rows,
// bit-identical to MatVec on each.
func MatMul(t quant.Type, w []byte, rows, n int, act []byte, m int, out []float32, threads int) error {
	return kit.MatMul(t, w, rows, n, act, m, out, threads)
}

// MatVecF32 is MatVec on an f32 activation row, quantized first.
func MatVecF32(t quant.Type, w []byte, rows, n int, x []float32, out []float32, threads int) error {
	return kit.MatVecF32(t, w, rows, n, x, out, threads)
}
