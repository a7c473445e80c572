// Package runtime assembles what runs a model: it opens a GGUF file's
// architecture on the kernels backend and through the stager a profile
// names, within the profile's memory budget, and says how it runs (the
// mode line). Every command that runs a model, and the server's local
// backend, start it here.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"runtime/debug"
	"sync"

	"github.com/k3-inference/k3/core/buildinfo"
	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/tokenizer"
)

// Options are what a runtime takes beside the file and the profile.
type Options struct {
	// Threads are the compute threads; <= 0: the profile's, else one per
	// CPU.
	Threads int
	// Mapped runs the weights on a plain mapping of the file instead of
	// through the profile's stager: no budget applies.
	Mapped bool
	// Context is the most tokens a sequence will hold, which the budget
	// reserves state for; <= 0: the profile's, else the file's training
	// context.
	Context int
	// UBatch is the most tokens one forward call runs (the prefill
	// chunk); <= 0: the profile's when it sets ubatch, else through a
	// stager with a memory budget the largest chunk the budget allows
	// (engine.Budget.Chunk), else the profile's default or
	// engine.DefaultUBatch.
	UBatch int
	// Slots is the sequences an engine keeps, each reserved in the
	// budget; <= 0: the profile's server.parallel, else 1.
	Slots int
	// PrefixCache is the engines' shared prefix cache (its Mem is
	// reserved in the budget); zero: the profile's server.prefix_cache_*
	// settings. Its Fingerprint is the file's, filled in by Engine.
	PrefixCache engine.CacheOptions
	// Kernels, when it names a backend (Name or Path), replaces the
	// profile's kernels section (a command's flags); without either, the
	// reference kernels.
	Kernels config.Kernels
	// KernelsEnv is added to a kernels plugin process's environment.
	KernelsEnv []string
	// Footprints are the built-in stagers' own sizing by profile stager
	// name (the host registers its built-in plugins; core does not import
	// them). A stager without one is sized by engine.PageFootprint.
	Footprints map[string]engine.Footprint
	// Logger receives the plugins' log lines; nil: slog.Default().
	Logger *slog.Logger
	// Warn receives what the runtime changed of the profile (a budget
	// lowered to what the machine gives) before it goes on; nil: Logger.
	Warn func(msg string)
	// Machine is what budgets are fitted to; nil: config.Detect.
	Machine func(path string) config.Machine
}

// withDefaults fills in what o leaves to the profile and the file.
func (o Options) withDefaults(f *gguf.File, prof *config.Profile) Options {
	if o.Threads <= 0 && prof != nil {
		o.Threads = prof.Threads
	}
	if o.Threads <= 0 {
		o.Threads = goruntime.NumCPU()
	}
	if o.Context <= 0 && prof != nil {
		o.Context = prof.Context
	}
	if o.Context <= 0 {
		o.Context = int(f.Uint("context_length", 0))
	}
	if o.UBatch <= 0 && prof != nil && prof.Explicit("ubatch") {
		o.UBatch = prof.UBatch
	}
	if o.Slots <= 0 && prof != nil {
		o.Slots = prof.Server.Parallel
	}
	o.Slots = max(o.Slots, 1)
	if o.PrefixCache == (engine.CacheOptions{}) && prof != nil {
		s := prof.Server
		o.PrefixCache = engine.CacheOptions{Mem: int64(s.PrefixCacheMem), Dir: s.PrefixCacheDir, DiskMax: int64(s.PrefixCacheDiskMax)}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Warn == nil {
		o.Warn = defaultWarn(o.Logger)
	}
	if o.Machine == nil {
		o.Machine = config.Detect
	}
	return o
}

// kernels is the kernels section that runs.
func (o Options) kernels(prof *config.Profile) (config.Kernels, error) {
	k := config.Kernels{Name: "reference", Mode: "process"}
	switch {
	case o.Kernels.Name != "" || o.Kernels.Path != "":
		k = o.Kernels
	case prof != nil:
		k = prof.Kernels
	}
	if k.Mode == "" {
		k.Mode = "process"
	}
	if k.Mode != "process" && k.Mode != "inprocess" {
		return k, fmt.Errorf("runtime: kernels mode %q is not process or inprocess", k.Mode)
	}
	return k, nil
}

// Runtime is a model ready to run: its weights through a stager (or on a
// plain mapping of the file), its matrix products on a kernels backend.
type Runtime struct {
	File *gguf.File
	Arch model.Arch
	// Model is the architecture's model on Staged and Kernels.
	Model model.Model
	// Staged serves the weights; nil on a plain mapping of the file.
	Staged *engine.Staged
	// Kernels runs the matrix products.
	Kernels engine.Kernels
	// Budget is how the memory budget divides (Staged.Budget); zero on a
	// plain mapping.
	Budget engine.Budget
	// Profile is the profile as it runs: its budget fitted to the machine
	// and its kernels those that run. nil without one.
	Profile *config.Profile
	// Mode is how it runs; Mode.String is the mode line.
	Mode Mode
	// Threads, Context, UBatch and Slots are Options' after defaults.
	Threads, Context, UBatch, Slots int
	// PrefixCache is Options' (without the fingerprint).
	PrefixCache engine.CacheOptions

	ownFile bool
	log     *slog.Logger
	// heapLimit is the Go memory limit Open set (0: none), oldHeapLimit
	// the one Close restores.
	heapLimit, oldHeapLimit int64
	tokOnce                 sync.Once
	tok                     *tokenizer.Tokenizer
	tokErr                  error
	closeOnce               sync.Once
	closeErr                error
}

// Open opens the model file at path (the first shard of a split set, the
// others next to it or in the profile's shard_path) and its runtime;
// Close closes the file too.
func Open(ctx context.Context, path string, prof *config.Profile, o Options) (*Runtime, error) {
	f, err := gguf.OpenWith(path, OpenOptions(prof))
	if err != nil {
		return nil, err
	}
	r, err := OpenFile(ctx, f, prof, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.ownFile = true
	return r, nil
}

// OpenOptions say how to open the model file under prof (nil: defaults):
// where else its shards may lie.
func OpenOptions(prof *config.Profile) gguf.OpenOptions {
	if prof == nil {
		return gguf.OpenOptions{}
	}
	return gguf.OpenOptions{ShardPath: prof.ShardPath}
}

// OpenFile starts f's model as prof says: the kernels backend it names,
// and (unless o.Mapped, or without a profile) its stager within its memory
// budget, fitted to the machine first and refused when it cannot run one
// step (engine.BudgetError). f stays the caller's.
func OpenFile(ctx context.Context, f *gguf.File, prof *config.Profile, o Options) (*Runtime, error) {
	o = o.withDefaults(f, prof)
	kset, err := o.kernels(prof)
	if err != nil {
		return nil, err
	}
	arch, err := model.Find(f)
	if err != nil {
		return nil, err
	}
	r := &Runtime{File: f, Arch: arch, Threads: o.Threads, Context: o.Context, UBatch: o.UBatch, Slots: o.Slots, PrefixCache: o.PrefixCache, log: o.Logger}
	staged := prof != nil && !o.Mapped
	var so engine.StageOptions
	if staged {
		if arch, err = stagedArch(f); err != nil {
			return nil, err
		}
		if prof, err = fitBudget(prof, f.Path(), o.Machine, o.Warn); err != nil {
			return nil, err
		}
		if so, err = stageOptions(f, arch, prof, o); err != nil {
			return nil, err
		}
		// Refuse a budget that cannot run before anything starts.
		b, err := engine.PlanBudget(f, so)
		if err != nil {
			return nil, err
		}
		if err := b.Check(); err != nil {
			return nil, err
		}
		r.UBatch = b.Chunk
		if b.Total > 0 {
			// The Go heap holds the activations, the sequence state and
			// what the headroom is for; without a limit the collector
			// lets it grow to twice what is live (GOGC 100) and a large
			// prefill chunk would pass the budget.
			r.heapLimit = b.Headroom + b.State + b.Activations
		}
	}
	if r.UBatch <= 0 && prof != nil {
		r.UBatch = prof.UBatch
	}
	if r.UBatch <= 0 {
		r.UBatch = engine.DefaultUBatch
	}
	if prof != nil {
		p := *prof
		p.Kernels = kset
		r.Profile = &p
	}
	if r.Kernels, err = engine.OpenKernels(ctx, kset, engine.KernelsOptions{Env: o.KernelsEnv, Logger: o.Logger}); err != nil {
		return nil, err
	}
	mo := model.Options{Threads: o.Threads, Backend: r.Kernels}
	var w model.Weights = f
	if staged {
		if r.Staged, err = engine.OpenStaged(ctx, f, so); err != nil {
			r.Close()
			return nil, err
		}
		r.Budget, w = r.Staged.Budget(), r.Staged
	}
	if r.Model, err = arch.New(f, w, mo); err != nil {
		r.Close()
		return nil, fmt.Errorf("model: %s: %w", f.Path(), err)
	}
	if pk, ok := r.Kernels.(*engine.PluginKernels); ok && r.Staged != nil {
		pk.Follow(r.Staged) // a restarted stager maps its regions anew
	}
	if r.heapLimit > 0 {
		r.oldHeapLimit = debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(min(r.heapLimit, r.oldHeapLimit))
	}
	r.Mode = r.mode()
	return r, nil
}

// mode describes r for the mode line.
func (r *Runtime) mode() Mode {
	bi := buildinfo.Get()
	m := Mode{Profile: "none", Stager: "none", DirectIO: "off", Threads: r.Threads, Kernels: r.Kernels.Name(),
		Slots: r.Slots, PrefixCache: config.Size(r.PrefixCache.Mem), PrefixCacheDir: r.PrefixCache.Dir,
		Version: bi.Version, Revision: bi.ShortRevision()}
	if r.Profile != nil {
		m.Profile, m.Detected = r.Profile.Name, r.Profile.Detected()
	}
	if r.Staged == nil {
		return m
	}
	s := r.Profile.Stager
	m.Stager, m.StagerMode, m.StagerSays, m.StagerOptions = s.Name, s.Mode, r.Staged.Mode(), r.Staged.Options()
	if s.Path != "" {
		m.Stager += "@" + s.Path
	}
	m.Budget, m.DirectIO = r.Profile.Memory.Budget, s.DirectIO
	if s.Lookahead {
		m.Lookahead = s.PrefetchDepth
	}
	b := r.Budget
	m.Split = &b
	return m
}

// Tokenizer is the file's tokenizer, read on first use (eval and bench
// run token ids and never need it).
func (r *Runtime) Tokenizer() (*tokenizer.Tokenizer, error) {
	r.tokOnce.Do(func() {
		r.tok, r.tokErr = tokenizer.FromGGUF(r.File)
		if r.tokErr != nil {
			r.tokErr = fmt.Errorf("%s: %w", r.File.Path(), r.tokErr)
		}
	})
	return r.tok, r.tokErr
}

// Engine is an engine over the runtime's model and tokenizer; a zero
// Context or UBatch in eo is the runtime's.
func (r *Runtime) Engine(eo engine.Options) (*engine.Engine, error) {
	tok, err := r.Tokenizer()
	if err != nil {
		return nil, err
	}
	if eo.Context <= 0 {
		eo.Context = r.Context
	}
	if eo.UBatch <= 0 {
		eo.UBatch = r.UBatch
	}
	if eo.Slots <= 0 {
		eo.Slots = r.Slots
	}
	if eo.PrefixCache == (engine.CacheOptions{}) {
		eo.PrefixCache = r.PrefixCache
	}
	if eo.PrefixCache.Dir != "" && eo.PrefixCache.Fingerprint == ([32]byte{}) {
		if eo.PrefixCache.Fingerprint, err = r.File.Fingerprint(); err != nil {
			return nil, err
		}
	}
	if eo.PrefixCache.Logger == nil {
		eo.PrefixCache.Logger = r.log
	}
	return engine.New(r.Model, tok, eo)
}

// Health is nil while the stager and kernels plugins run, else which of
// them is down or restarting and since when (the server's /health).
func (r *Runtime) Health() error {
	var errs []error
	if r.Staged != nil {
		errs = append(errs, r.Staged.Supervisor().Health().Err())
	}
	if pk, ok := r.Kernels.(*engine.PluginKernels); ok {
		errs = append(errs, pk.Supervisor().Health().Err())
	}
	return errors.Join(errs...)
}

// Close stops the runtime: the stager, then the kernels (which may map
// the stager's memory), then the file when Open opened it. Whatever uses
// the model (an engine, a server draining its requests) must have stopped
// first. Close is safe to call more than once.
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		if r.Staged != nil {
			errs = append(errs, r.Staged.Close())
		}
		if r.Kernels != nil {
			errs = append(errs, r.Kernels.Close())
		}
		if r.ownFile {
			errs = append(errs, r.File.Close())
		}
		if r.heapLimit > 0 {
			debug.SetMemoryLimit(r.oldHeapLimit)
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}
