package runtime

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/plugin/host"
)

// snapshots is how many prefix snapshots an engine keeps by default
// (engine.Options.Snapshots 0): each copies the state's fixed part.
const snapshots = 1

// stateReserve is the memory the sequence state of arch's model in f can
// reach at seqLen tokens in each of slots sequences: every live sequence
// at a full context and its prefix snapshots' copies of the fixed part,
// plus the shared prefix cache's share.
func stateReserve(f *gguf.File, arch model.Arch, seqLen, slots int, prefixCache int64) (int64, error) {
	if arch.StateSize == nil {
		return prefixCache, nil
	}
	fixed, perToken, err := arch.StateSize(f, f)
	if err != nil {
		return 0, err
	}
	ctx := int64(seqLen+255) / 256 * 256 // as engine.Runner.SetContext sizes it
	return int64(max(slots, 1))*(fixed*(1+snapshots)+perToken*ctx) + prefixCache, nil
}

// stagedArch is f's architecture when it can run through a stager.
func stagedArch(f *gguf.File) (model.Arch, error) {
	arch, err := model.Find(f)
	if err != nil {
		return arch, err
	}
	if !arch.Staged() {
		return arch, fmt.Errorf("%s: architecture %q cannot run through a stager (its registration names no routed experts); run it on the plain mapping", f.Path(), f.Arch())
	}
	return arch, nil
}

// Plan is how prof's memory budget divides for f's model when it runs
// through prof's stager with o (o.Context and o.UBatch as Open takes
// them): what Open checks before it starts the stager, without fitting
// the budget to the machine first.
func Plan(f *gguf.File, prof *config.Profile, o Options) (engine.Budget, error) {
	arch, err := stagedArch(f)
	if err != nil {
		return engine.Budget{}, err
	}
	so, err := stageOptions(f, arch, prof, o.withDefaults(f, prof))
	if err != nil {
		return engine.Budget{}, err
	}
	return engine.PlanBudget(f, so)
}

// stageOptions turns a profile into how to start and open its stager: its
// memory budget, of which the core keeps the sequence state at o.Context
// tokens (attention caches, recurrent state, prefix snapshots) and
// headroom (engine.Headroom). Without a budget the stager gets room for
// the whole model.
func stageOptions(f *gguf.File, arch model.Arch, prof *config.Profile, o Options) (engine.StageOptions, error) {
	state, err := stateReserve(f, arch, o.Context, o.Slots, o.PrefixCache.Mem)
	if err != nil {
		return engine.StageOptions{}, err
	}
	var actFixed, actPerToken int64
	if arch.Activations != nil {
		if actFixed, actPerToken, err = arch.Activations(f, f); err != nil {
			return engine.StageOptions{}, err
		}
		// The model counts a kernels plugin's arena copies itself
		// (kimi-k3: the per-token part lives in Go memory only, each
		// row range's buffers twice).
		if o.Logger != nil {
			o.Logger.Debug("activations reserve", "fixed", actFixed, "per_token", actPerToken)
		}
	}
	s := prof.Stager
	so := engine.StageOptions{
		ActivationsFixed: actFixed, ActivationsPerToken: actPerToken,
		Launch: host.Launch{Name: "staging-" + s.Name, Path: s.Path, InProcess: s.Mode == "inprocess", Logger: o.Logger},
		Memory: int64(prof.Memory.Budget), State: state, Context: o.Context, UBatch: o.UBatch,
		Experts: arch.Experts,
		// prefetch_depth 0 turns the guesses off like lookahead false.
		Lookahead:      s.Lookahead && s.PrefetchDepth > 0,
		LookaheadDepth: s.PrefetchDepth,
		LookaheadFixed: s.LookaheadMode == "fixed",
	}
	// The stager gets the options it declares (engine.OpenStaged checks
	// the profile against its declaration).
	so.Options, so.Implied = prof.StagerOptions()
	if prof.Name == "auto" && !prof.Explicit("stager.io_workers") {
		// Shards on several devices: each device's probe sizes its
		// readers (offered to a stager that declares device_workers).
		if dw := config.DeviceWorkers(f.Paths(), "", 1500*time.Millisecond); dw != "" {
			so.Implied["device_workers"] = dw
		}
	}
	if s.Path != "" {
		so.Launch.Name = s.Name
	} else {
		so.Footprint = o.Footprints[s.Name]
	}
	return so, nil
}

// fitBudget returns prof, or a copy with its budget lowered to what the
// machine can give, passing the warning to warn.
func fitBudget(prof *config.Profile, path string, machine func(string) config.Machine, warn func(string)) (*config.Profile, error) {
	b, msg, err := config.FitBudget(prof.Memory.Budget, machine(path))
	if err != nil || msg == "" {
		return prof, err
	}
	warn(msg)
	p := *prof
	p.Memory.Budget = b
	return &p, nil
}

// defaultWarn logs a warning when Options.Warn is nil.
func defaultWarn(log *slog.Logger) func(string) {
	return func(msg string) { log.Warn(msg) }
}
