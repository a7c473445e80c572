package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/plugin"
	stagingmmap "github.com/k3-inference/k3/plugins/staging-mmap"
	stagingpread "github.com/k3-inference/k3/plugins/staging-pread"
)

// stagedArchs are the architectures whose forward pass reads routed
// experts through a stager.
var stagedArchs = map[string]model.New{"kimi-k3": kimik3.New}

// stateSizes say, per architecture, what one sequence holds: fixed bytes
// and bytes per position (kimik3.StateSize).
var stateSizes = map[string]func(model.Config, model.Weights) (int64, int64, error){"kimi-k3": kimik3.StateSize}

// stateReserve is the memory the core's sequence state can reach at seqLen
// tokens (serve and run: the profile's context): the live sequence at a
// full context and the prefix snapshots' copies of its fixed part
// (engine.Options.Snapshots, one by default).
func stateReserve(f *gguf.File, seqLen int) (int64, error) {
	size, ok := stateSizes[f.Arch()]
	if !ok {
		return 0, nil
	}
	fixed, perToken, err := size(f, f)
	if err != nil {
		return 0, err
	}
	const snapshots = 1
	ctx := int64(seqLen+255) / 256 * 256 // as engine.Runner.SetContext sizes it
	return fixed*(1+snapshots) + perToken*ctx, nil
}

// stageFlags are the flags that select a profile and override its
// staging settings; each sets the profile key it names.
type stageFlags struct {
	profile *string
	values  map[string]*string
	fs      *flag.FlagSet
}

var stageFlagKeys = []struct{ name, key, usage string }{
	{"cpilot-memory", "memory.budget", "memory budget in GiB (K3Flight's spelling; a size such as 2G also works)"},
	{"memory-budget", "memory.budget", "memory budget, e.g. 2G or 512MiB"},
	{"stager", "stager.name", "staging backend: pread or mmap"},
	{"stager-mode", "stager.mode", "process (a `k3 plugin` subprocess) or inprocess"},
	{"stager-path", "stager.path", "an external stager plugin binary"},
	{"direct-io", "stager.direct_io", "auto, on or off"},
	{"io-workers", "stager.io_workers", "concurrent storage readers"},
	{"lookahead", "stager.lookahead", "predict the next layers' experts and prefetch them (true or false)"},
	{"prefetch-depth", "stager.prefetch_depth", "how many layers ahead lookahead guesses (0: none)"},
}

func addStageFlags(fs *flag.FlagSet) *stageFlags {
	sf := &stageFlags{values: map[string]*string{}, fs: fs}
	sf.profile = fs.String("profile", "", "hardware profile (a YAML file or auto): weights come through its stager within its memory budget; empty: map the file directly, no budget")
	for _, f := range stageFlagKeys {
		v := new(string)
		sf.values[f.name] = v
		fs.StringVar(v, f.name, "", f.usage)
	}
	return sf
}

// load returns the profile the flags select, or nil for the plain mapped
// path (no --profile and no staging flag).
func (sf *stageFlags) load(path string) (*config.Profile, error) {
	set := map[string]any{}
	var err error
	sf.fs.Visit(func(f *flag.Flag) {
		v, ok := sf.values[f.Name]
		if !ok {
			return
		}
		for _, k := range stageFlagKeys {
			if k.name != f.Name {
				continue
			}
			val := any(*v)
			switch k.key {
			case "memory.budget":
				if f.Name == "cpilot-memory" && isDigits(*v) {
					val = *v + "G"
				}
			case "stager.io_workers", "stager.prefetch_depth":
				n, e := strconv.Atoi(*v)
				if e != nil {
					err = fmt.Errorf("--%s: %q is not an integer", f.Name, *v)
				}
				val = n
			case "stager.lookahead":
				b, e := strconv.ParseBool(*v)
				if e != nil {
					err = fmt.Errorf("--%s: %q is not true or false", f.Name, *v)
				}
				val = b
			}
			set[k.key] = val
		}
	})
	if err != nil {
		return nil, err
	}
	if *sf.profile == "" && len(set) == 0 {
		return nil, nil
	}
	return config.Load(config.Options{Profile: *sf.profile, ModelPath: path, Flags: set})
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// loadedModel is a model and, when a profile staged it, its stager.
type loadedModel struct {
	model.Model
	staged *engine.Staged
}

func (lm *loadedModel) Close() error {
	if lm.staged != nil {
		return lm.staged.Close()
	}
	return nil
}

// loadModel builds f's model: on the plain mapping of the file without a
// profile, through the profile's stager within its budget otherwise. It
// prints the mode line.
func loadModel(ctx context.Context, f *gguf.File, prof *config.Profile, o model.Options, seqLen int, stderr io.Writer) (*loadedModel, error) {
	if prof == nil {
		m, err := model.Load(f, o)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "k3: profile=none stager=none (weights mapped from the file) threads=%d\n", o.Threads)
		return &loadedModel{Model: m}, nil
	}
	newModel, ok := stagedArchs[f.Arch()]
	if !ok {
		return nil, fmt.Errorf("%s: architecture %q cannot run through a stager yet (only kimi-k3)", f.Path(), f.Arch())
	}
	prof, err := fitBudget(prof, f.Path(), stderr)
	if err != nil {
		return nil, err
	}
	state, err := stateReserve(f, seqLen)
	if err != nil {
		return nil, err
	}
	st, err := engine.OpenStaged(ctx, f, stageOptions(prof, seqLen, state))
	if err != nil {
		return nil, err
	}
	m, err := newModel(f, st, o)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("model: %s: %w", f.Path(), err)
	}
	fmt.Fprintf(stderr, "%s %s stager-options=%s stager-mode=%q\n", prof.ModeLine(o.Threads), budgetFields(st.Budget()), plugin.FormatOptions(st.Options()), st.Mode())
	return &loadedModel{Model: m, staged: st}, nil
}

// budgetFields are the mode line's account of the budget: what the
// always-needed weights, the experts the largest step pins at once and the
// sequence state take of it, and the stager's part.
func budgetFields(b engine.Budget) string {
	return fmt.Sprintf("always-needed=%s step-pin=%s(%dx%s) state-reserve=%s stager-budget=%s",
		config.Size(b.Resident), config.Size(b.StepPin()), b.Group(), config.Size(b.Unit), config.Size(b.State), config.Size(b.Stager))
}

// machine is what budgets are fitted to; tests replace it.
var machine = config.Detect

// fitBudget returns prof, or a copy with its budget lowered to what the
// machine can give, saying so on stderr.
func fitBudget(prof *config.Profile, path string, stderr io.Writer) (*config.Profile, error) {
	b, warn, err := config.FitBudget(prof.Memory.Budget, machine(path))
	if err != nil || warn == "" {
		return prof, err
	}
	fmt.Fprintf(stderr, "k3: warning: %s\n", warn)
	p := *prof
	p.Memory.Budget = b
	return &p, nil
}

// stagerFootprints are the built-in stagers' own sizing: the budget
// check and the grouping of a step's experts use the arithmetic the
// stager will.
var stagerFootprints = map[string]engine.Footprint{"pread": stagingpread.Footprint, "mmap": stagingmmap.Footprint}

// stageOptions turns a profile into how to start and open its stager: its
// memory budget, of which the core keeps the sequence state at seqLen
// tokens (state, from stateReserve: attention caches, recurrent state,
// prefix snapshots) and headroom (engine.Headroom). Without a budget the
// stager gets room for the whole model.
func stageOptions(prof *config.Profile, seqLen int, state int64) engine.StageOptions {
	s := prof.Stager
	so := engine.StageOptions{
		Launch: plugin.Launch{Name: "staging-" + s.Name, Path: s.Path, InProcess: s.Mode == "inprocess", Logger: slog.Default()},
		Memory: int64(prof.Memory.Budget), State: state, Context: seqLen, UBatch: prof.UBatch,
		// prefetch_depth 0 turns the guesses off like lookahead false.
		Lookahead:      s.Lookahead && s.PrefetchDepth > 0,
		LookaheadDepth: s.PrefetchDepth,
	}
	so.Options, so.Implied = prof.StagerOptions()
	if s.Path != "" {
		so.Launch.Name = s.Name
	} else {
		so.Footprint = stagerFootprints[s.Name]
	}
	return so
}

// stagerReport is the stager's part of a run's numbers, printed as JSON.
type stagerReport struct {
	Stager             string  `json:"stager"`
	Restarts           int     `json:"restarts"`
	Hits               uint64  `json:"hits"`
	Misses             uint64  `json:"misses"`
	HitRate            float64 `json:"hit_rate"`
	BytesRead          int64   `json:"bytes_read"`
	DecodeTokens       int     `json:"decode_tokens"`
	DecodeBytesRead    int64   `json:"decode_bytes_read"`
	BytesReadPerToken  float64 `json:"decode_bytes_read_per_token"`
	DecodeSeconds      float64 `json:"decode_s"`
	DecodeWaitSeconds  float64 `json:"decode_wait_s"`
	WaitShare          float64 `json:"decode_wait_share"`
	AcquireShare       float64 `json:"decode_acquire_share"`
	ReadSeconds        float64 `json:"read_s"`
	ResidentBytes      int64   `json:"resident_bytes"`
	BudgetBytes        int64   `json:"budget_bytes"`
	DirectIO           bool    `json:"direct_io"`
	LookaheadPredicted uint64  `json:"lookahead_predicted"`
	LookaheadPrecision float64 `json:"lookahead_precision"`
}

// newStagerReport sums up a run: end is the stager's counters at the end,
// atDecode when decoding began; decode is the decode phase's wall time
// over tokens forward calls.
func newStagerReport(end, atDecode engine.StageStats, tokens int, decode time.Duration) stagerReport {
	r := stagerReport{
		Stager: end.Mode, Restarts: end.Restarts, Hits: end.Hits, Misses: end.Misses, BytesRead: end.BytesRead,
		DecodeTokens: tokens, DecodeBytesRead: end.BytesRead - atDecode.BytesRead, DecodeSeconds: decode.Seconds(),
		DecodeWaitSeconds: (end.WaitTime - atDecode.WaitTime).Seconds(), ReadSeconds: end.ReadTime.Seconds(),
		ResidentBytes: end.ResidentBytes, BudgetBytes: end.BudgetBytes, DirectIO: end.DirectIO,
		LookaheadPredicted: end.Predicted, LookaheadPrecision: end.Precision(),
	}
	if n := end.Hits + end.Misses; n > 0 {
		r.HitRate = float64(end.Hits) / float64(n)
	}
	if tokens > 0 {
		r.BytesReadPerToken = float64(r.DecodeBytesRead) / float64(tokens)
	}
	if decode > 0 {
		r.WaitShare = r.DecodeWaitSeconds / decode.Seconds()
		r.AcquireShare = (end.AcquireTime - atDecode.AcquireTime).Seconds() / decode.Seconds()
	}
	return r
}

func printStagerReport(w io.Writer, r stagerReport) error {
	b, err := json.Marshal(struct {
		Stats stagerReport `json:"stager_stats"`
	}{r})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
