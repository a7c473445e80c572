package main

import (
	"flag"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
)

// kernelsEnv is added to a kernels plugin's environment (tests make the
// re-executed test binary act as k3).
var kernelsEnv []string

// kernelsFlags select the compute backend; each overrides the profile's
// kernels key of the same name.
type kernelsFlags struct {
	name, mode, path, float *string
}

func addKernelsFlags(fs *flag.FlagSet) *kernelsFlags {
	return &kernelsFlags{
		name:  fs.String("kernels", "", "compute kernels: auto, avx512, avx2 or reference (default: the profile's; reference without a profile)"),
		mode:  fs.String("kernels-mode", "", "process (a 'k3 plugin kernels-NAME' subprocess) or inprocess (default: the profile's, else process)"),
		path:  fs.String("kernels-path", "", "an external kernels plugin binary"),
		float: fs.String("kernels-float", "", "F32/F16/BF16 arithmetic of the SIMD kernels: exact (the reference's bits) or fast (float32 lanes: ~2x on F16/BF16 matrices, ~1.1-1.3x on F32) (default: the profile's, else exact)"),
	}
}

// settings are the kernels section the flags and the profile make.
func (kf *kernelsFlags) settings(prof *config.Profile) config.Kernels {
	k := config.Kernels{Name: "reference", Mode: "process"}
	if prof != nil {
		k = prof.Kernels
	}
	if *kf.name != "" {
		k.Name = *kf.name
	}
	if *kf.mode != "" {
		k.Mode = *kf.mode
	}
	if *kf.path != "" {
		k.Path = *kf.path
	}
	if *kf.float != "" {
		k.Float = *kf.float
	}
	return k
}

// kernelsStats are b's boundary counters (zero for the reference).
func kernelsStats(b engine.Kernels) engine.KernelsStats {
	if pk, ok := b.(*engine.PluginKernels); ok {
		return pk.Stats()
	}
	return engine.KernelsStats{}
}

// kernelsReport is the boundary's part of the decode phase's numbers: what
// changed since at, over tokens decoded tokens.
func kernelsReport(b engine.Kernels, at engine.KernelsStats, tokens int) []any {
	s := kernelsStats(b)
	if s.Batches == 0 {
		return nil
	}
	per := func(v float64) float64 { return v / float64(max(tokens, 1)) }
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	boundary := (s.Wall - at.Wall) - (s.Compute - at.Compute)
	return []any{"kernels", b.Name(),
		"batches_per_token", per(float64(s.Batches - at.Batches)), "ops_per_token", per(float64(s.Ops - at.Ops)),
		"fallback_ops", s.Fallbacks, "boundary_ms_per_token", per(ms(boundary)),
		"plugin_compute_ms_per_token", per(ms(s.Compute - at.Compute)),
		"copied_bytes_per_token", per(float64(s.CopiedBytes - at.CopiedBytes)), "copy_ms_per_token", per(ms(s.CopyTime - at.CopyTime)),
		"restarts", s.Restarts}
}
