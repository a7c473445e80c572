package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/klauspost/cpuid/v2"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
)

// CPU is what kernels selection needs to know of a processor.
type CPU struct {
	// AVX2 means AVX2, FMA and F16C; AVX512 means AVX-512 F, BW and VL on
	// top of those.
	AVX2, AVX512 bool
}

// HostCPU is this machine's processor.
func HostCPU() CPU {
	avx2 := cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	return CPU{AVX2: avx2, AVX512: avx2 && cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL)}
}

// KernelsPlugin maps a profile's kernels name to the built-in plugin that
// implements it.
var KernelsPlugin = map[string]string{"avx2": "kernels-avx2", "avx512": "kernels-avx512"}

// ChooseKernels resolves a profile's kernels name for cpu: "auto" is the
// best the CPU runs, "reference" the core's own ops, and a forced name the
// CPU cannot run is an error rather than a silent fallback.
func ChooseKernels(name string, cpu CPU) (string, error) {
	switch name {
	case "", "auto":
		switch {
		case cpu.AVX512:
			return "avx512", nil
		case cpu.AVX2:
			return "avx2", nil
		}
		return "reference", nil
	case "reference":
		return name, nil
	case "avx2":
		if !cpu.AVX2 {
			return "", fmt.Errorf("kernels %q: this CPU lacks AVX2+FMA+F16C; use kernels.name auto or reference", name)
		}
		return name, nil
	case "avx512":
		if !cpu.AVX512 {
			return "", fmt.Errorf("kernels %q: this CPU lacks AVX-512 F/BW/VL (avx2 available: %v); use kernels.name auto, avx2 or reference", name, cpu.AVX2)
		}
		return name, nil
	}
	return "", fmt.Errorf("kernels %q: not one of auto, avx512, avx2, reference (an external plugin needs kernels.path)", name)
}

// KernelsOptions tune OpenKernels.
type KernelsOptions struct {
	// CPU overrides HostCPU (tests force feature sets with it).
	CPU *CPU
	// Env is added to a plugin process's environment.
	Env []string
	// Logger receives the plugin's log lines.
	Logger *slog.Logger
	// ArenaSize is the size of the shared arena (default 1 GiB; the file
	// is sparse, pages exist only once written).
	ArenaSize int64
	// ScratchSize is the arena memory one forward pass may take for its
	// buffers (default 256 MiB); beyond it buffers are copied in and out.
	ScratchSize int64
	// FastFloat lets the plugin run F32/F16/BF16 weights in float mode fast
	// (plugin.MatMul.FastFloat; OpenKernels sets it from kernels.float).
	FastFloat bool
}

// Kernels is a compute backend for the ops of a model, with the resources
// it holds.
type Kernels interface {
	ops.Backend
	Close() error
}

type referenceKernels struct{ ops.Backend }

func (referenceKernels) Close() error { return nil }

// OpenKernels starts the backend a profile's kernels section names: the
// reference, or a kernels plugin (the built-in avx2/avx512 re-executed as
// `k3 plugin kernels-NAME`, in this process with mode inprocess, or an
// external binary with path) behind a supervisor that restarts it.
func OpenKernels(ctx context.Context, k config.Kernels, o KernelsOptions) (Kernels, error) {
	l := host.Launch{Name: k.Name, Path: k.Path, Env: o.Env, Logger: o.Logger, InProcess: k.Mode == "inprocess"}
	switch k.Float {
	case "", "exact":
	case "fast":
		o.FastFloat = true
	default:
		return nil, fmt.Errorf("engine: kernels.float %q is not exact or fast", k.Float)
	}
	if k.Path == "" {
		cpu := HostCPU()
		if o.CPU != nil {
			cpu = *o.CPU
		}
		name, err := ChooseKernels(k.Name, cpu)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		if name == "reference" {
			if o.FastFloat && o.Logger != nil {
				o.Logger.Warn("kernels.float fast has no effect on the reference kernels: they are always exact")
			}
			return referenceKernels{ops.Reference}, nil
		}
		l.Name = KernelsPlugin[name]
	}
	return StartKernels(ctx, l, o)
}

// StartKernels starts the kernels plugin l names under supervision and
// creates the arena it computes in.
func StartKernels(ctx context.Context, l host.Launch, o KernelsOptions) (*PluginKernels, error) {
	if o.ArenaSize <= 0 {
		o.ArenaSize = 1 << 30
	}
	if o.ScratchSize <= 0 {
		o.ScratchSize = 256 << 20
	}
	o.ScratchSize = min(o.ScratchSize, o.ArenaSize/2)
	sup, err := host.SuperviseKernels(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("engine: kernels %s: %w", l.Name, err)
	}
	info, err := sup.Describe(ctx)
	if err != nil {
		sup.Close()
		return nil, fmt.Errorf("engine: kernels %s: describe: %w", l.Name, err)
	}
	opts, err := kernelsOptions(l.Name, info, o.FastFloat)
	if err != nil {
		sup.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	arena, err := host.CreateArena(host.ShmDir(), o.ArenaSize)
	if err != nil {
		sup.Close()
		return nil, fmt.Errorf("engine: kernels %s: %w", l.Name, err)
	}
	k := &PluginKernels{name: info.Name, sup: sup, arena: arena, scratch: o.ScratchSize, types: map[quant.Type]bool{}, fastFloat: opts["float"] == "fast"}
	for _, op := range info.Ops {
		if op.Op == ops.OpMatMul {
			for _, t := range op.Types {
				k.types[t] = true
			}
		}
	}
	k.mode = "process"
	if l.InProcess {
		k.mode = "inprocess"
	}
	return k, nil
}

// kernelsOptions checks the profile's kernels settings against what the
// plugin declares: float fast must be declared (a plugin that does not
// know the mode would compute exact results under a mode line that says
// fast); float exact is what a plugin that declares nothing does anyway.
// The resolved float travels with each product (plugin.MatMul.FastFloat).
func kernelsOptions(name string, info *plugin.KernelsInfo, fast bool) (map[string]string, error) {
	set, implied := map[string]string{}, map[string]string{"float": "exact"}
	if fast {
		set["float"] = "fast"
	}
	return host.ResolveOptions("kernels "+name, info.Options, set, implied)
}

// ErrKernelsRestarts is returned when a batch failed on every restart of
// the plugin.
var ErrKernelsRestarts = errors.New("engine: kernels plugin keeps dying")

// execute runs req, re-issuing it after the supervisor restarted a dead
// plugin: the batch's inputs live in the arena and its outputs are written
// whole, so a re-issued batch computes the same bytes.
func (k *PluginKernels) execute(ctx context.Context, req *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	for attempt := 0; ; attempt++ {
		resp, err := k.sup.Execute(ctx, req)
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, host.ErrRestarted) {
			return nil, fmt.Errorf("engine: kernels %s: %w", k.name, err)
		}
		k.stats.Restarts++
		if attempt >= 3 {
			return nil, fmt.Errorf("%w: %v", ErrKernelsRestarts, err)
		}
	}
}

// modeName is how the mode line shows a backend.
func modeName(name, mode string) string {
	return strings.TrimSpace(name) + " " + mode
}
