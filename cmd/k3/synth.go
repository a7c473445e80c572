package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/synth"
)

func init() {
	register(&command{
		name:    "synth",
		summary: "write a synthetic GGUF checkpoint (kimi-k3, deepseek2 or qwen3moe, random weights) for tests and benchmarks",
		run:     runSynth,
	})
}

// Dimension flags override the preset's value only when given.
var synthIntFlags = []struct {
	name, usage string
	field       func(*synth.Config) *int
}{
	{"n-embd", "embedding width", func(c *synth.Config) *int { return &c.NEmbd }},
	{"n-layer", "number of layers", func(c *synth.Config) *int { return &c.NLayer }},
	{"n-head", "attention heads (KDA and MLA)", func(c *synth.Config) *int { return &c.NHead }},
	{"n-vocab", "vocabulary size", func(c *synth.Config) *int { return &c.NVocab }},
	{"n-ctx", "training context length", func(c *synth.Config) *int { return &c.NCtx }},
	{"n-ff", "dense FFN width", func(c *synth.Config) *int { return &c.NFF }},
	{"n-dense", "leading dense layers", func(c *synth.Config) *int { return &c.NDense }},
	{"conv-kernel", "KDA short convolution kernel", func(c *synth.Config) *int { return &c.ConvK }},
	{"kda-head-dim", "KDA head dimension", func(c *synth.Config) *int { return &c.KDAHead }},
	{"mla-every", "layer il is MLA when (il+1) % N == 0 (without --mla-layers)", func(c *synth.Config) *int { return &c.MLAEvery }},
	{"q-lora-rank", "MLA query LoRA rank; 0 = direct attn_q", func(c *synth.Config) *int { return &c.QLoRA }},
	{"kv-lora-rank", "MLA key/value latent rank", func(c *synth.Config) *int { return &c.KVLoRA }},
	{"qk-nope", "MLA key head dim without position", func(c *synth.Config) *int { return &c.QKNope }},
	{"qk-rope", "MLA key head dim of the k_pe part", func(c *synth.Config) *int { return &c.QKRope }},
	{"v-head", "MLA value head dim", func(c *synth.Config) *int { return &c.VHead }},
	{"n-expert", "routed experts", func(c *synth.Config) *int { return &c.NExpert }},
	{"n-expert-used", "experts per token", func(c *synth.Config) *int { return &c.NExpertUsed }},
	{"n-expert-shared", "shared experts", func(c *synth.Config) *int { return &c.NExpertShared }},
	{"n-ff-exp", "expert FFN width", func(c *synth.Config) *int { return &c.NFFExp }},
	{"n-latent", "routed-expert latent width; 0 = no latent MoE", func(c *synth.Config) *int { return &c.NLatent }},
	{"gating-func", "expert gating: 1 softmax, 2 sigmoid", func(c *synth.Config) *int { return &c.GatingFunc }},
	{"attn-res-block", "attention-residual block size; 0 = none", func(c *synth.Config) *int { return &c.AttnResBlock }},
	{"n-head-kv", "qwen3moe: KV heads (GQA)", func(c *synth.Config) *int { return &c.NHeadKV }},
	{"head-dim", "qwen3moe: attention head size", func(c *synth.Config) *int { return &c.HeadDim }},
}

var synthFloatFlags = []struct {
	name, usage string
	field       func(*synth.Config) *float32
}{
	{"rms-eps", "RMSNorm epsilon", func(c *synth.Config) *float32 { return &c.RMSEps }},
	{"expert-weights-scale", "routed expert weight scale", func(c *synth.Config) *float32 { return &c.ExpWeightsScale }},
	{"situ-beta", "SiTU beta", func(c *synth.Config) *float32 { return &c.SituBeta }},
	{"situ-linear-beta", "SiTU linear beta; 0 = off", func(c *synth.Config) *float32 { return &c.SituLinearBeta }},
	{"gate-lower-bound", "KDA gate lower bound; 0 = unset (softplus gate)", func(c *synth.Config) *float32 { return &c.GateLowerBound }},
	{"rope-freq-base", "rope frequency base (deepseek2, qwen3moe)", func(c *synth.Config) *float32 { return &c.RopeBase }},
}

var synthBoolFlags = []struct {
	name, usage string
	field       func(*synth.Config) *bool
}{
	{"mla-last", "the last layer is MLA too (without --mla-layers)", func(c *synth.Config) *bool { return &c.MLALast }},
	{"mla-gate", "MLA sigmoid output gate (attn_gate)", func(c *synth.Config) *bool { return &c.MLAGate }},
	{"routed-norm", "latent MoE output norm (ffn_routed_norm)", func(c *synth.Config) *bool { return &c.RoutedNorm }},
	{"expert-weights-norm", "normalise the chosen experts' weights", func(c *synth.Config) *bool { return &c.ExpWeightsNorm }},
}

// synthArgs holds the parsed flags of k3 synth.
type synthArgs struct {
	arch, preset, out, typ, splitSize, name, mlaLayers, routing *string
	chatTemplate                                                *string
	seed                                                        *uint64
	splitTensors, workers                                       *int
	ints                                                        map[string]*int
	floats                                                      map[string]*float64
	bools                                                       map[string]*bool
}

func newSynthFlags(stderr io.Writer) (*flag.FlagSet, *synthArgs) {
	fs := newFlags("synth", stderr)
	a := &synthArgs{
		arch: fs.String("arch", synth.Arch, "architecture: "+strings.Join(synth.Archs, ", ")),
		preset: fs.String("preset", "tiny", "base configuration: "+strings.Join(synth.Presets, ", ")+" (kimi-k3); tiny, kimi-k2, deepseek-v3 (deepseek2); "+
			strings.Join(synth.Qwen3MoEPresets, ", ")+" (qwen3moe)"),
		out:          fs.String("o", "", "output file (with splitting: the shard name prefix)"),
		typ:          fs.String("type", "", "output type: "+strings.Join(synth.OutTypes(), ", ")+" (default: the preset's). "+synth.MixHelp()),
		seed:         fs.Uint64("seed", 1, "random seed; the same seed and flags give the same bytes"),
		splitTensors: fs.Int("split-max-tensors", 0, "at most N tensors per shard"),
		splitSize:    fs.String("split-max-size", "", "at most this many tensor bytes per shard, e.g. 500M or 2G"),
		workers:      fs.Int("workers", 0, "row generation workers (0 = all CPUs)"),
		name:         fs.String("name", "", "general.name"),
		chatTemplate: fs.String("chat-template", "", "qwen3moe: tokenizer.chat_template, qwen3 or "+synth.ChatTemplateQwen3Coder+" (default: the preset's)"),
		mlaLayers:    fs.String("mla-layers", "", "comma-separated 0-based MLA layers (overrides --mla-every/--mla-last)"),
		routing: fs.String("routing", synth.RoutingRandom, "router weights: "+strings.Join(synth.RoutingModes, ", ")+
			" (realistic: Kimi K3's published lookahead precision, next-token reuse and even popularity, as k3 inspect --routing measures)"),
		ints:   map[string]*int{},
		floats: map[string]*float64{},
		bools:  map[string]*bool{},
	}
	for _, f := range synthIntFlags {
		a.ints[f.name] = fs.Int(f.name, 0, f.usage+" (default: the preset's)")
	}
	for _, f := range synthFloatFlags {
		a.floats[f.name] = fs.Float64(f.name, 0, f.usage+" (default: the preset's)")
	}
	for _, f := range synthBoolFlags {
		a.bools[f.name] = fs.Bool(f.name, false, f.usage+" (default: the preset's; =false to turn off)")
	}
	return fs, a
}

// config builds the configuration: the preset, then every flag given.
func (a *synthArgs) config(fs *flag.FlagSet) (synth.Config, synth.WriteOptions, error) {
	var opts synth.WriteOptions
	cfg, err := synth.ArchPreset(*a.arch, *a.preset)
	if err != nil {
		return cfg, opts, err
	}
	fs.Visit(func(f *flag.Flag) { applySynthFlag(&cfg, f.Name, a.ints, a.floats, a.bools) })
	cfg.Seed = *a.seed
	cfg.Routing = *a.routing
	if *a.name != "" {
		cfg.Name = *a.name
	}
	if *a.chatTemplate != "" {
		if cfg.Arch != synth.ArchQwen3MoE {
			return cfg, opts, fmt.Errorf("--chat-template is for --arch %s", synth.ArchQwen3MoE)
		}
		cfg.ChatTemplate = *a.chatTemplate
		if cfg.ChatTemplate == "qwen3" {
			cfg.ChatTemplate = ""
		}
	}
	if *a.typ != "" {
		if cfg.Type, err = synth.ParseOutType(*a.typ); err != nil {
			return cfg, opts, err
		}
	}
	if *a.mlaLayers != "" {
		if cfg.MLALayers, err = parseInts(*a.mlaLayers); err != nil {
			return cfg, opts, fmt.Errorf("--mla-layers: %w", err)
		}
	}
	opts = synth.WriteOptions{Workers: *a.workers, Split: gguf.SplitOptions{MaxTensors: *a.splitTensors}}
	if *a.splitSize != "" {
		if opts.Split.MaxBytes, err = parseSize(*a.splitSize); err != nil {
			return cfg, opts, fmt.Errorf("--split-max-size: %w", err)
		}
	}
	return cfg, opts, nil
}

func runSynth(args []string, stdout, stderr io.Writer) error {
	fs, a := newSynthFlags(stderr)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *a.out == "" {
		fmt.Fprintln(stderr, "k3 synth: -o FILE is required")
		return errUsage
	}
	cfg, opts, err := a.config(fs)
	if err != nil {
		return err
	}
	res, err := synth.Write(*a.out, cfg, opts)
	if err != nil {
		return err
	}
	for _, p := range res.Paths {
		fmt.Fprintln(stdout, p)
	}
	fmt.Fprintf(stdout, "wrote %d tensors, %d bytes in %d file(s), %.2fs, %.3f GB/s (%s, %s, seed %d)\n",
		res.Tensors, res.Bytes, len(res.Paths), res.Elapsed.Seconds(), res.GBps(), *a.arch+" "+*a.preset, cfg.Type, cfg.Seed)
	return nil
}

func applySynthFlag(cfg *synth.Config, name string, ints map[string]*int, floats map[string]*float64, bools map[string]*bool) {
	for _, f := range synthIntFlags {
		if f.name == name {
			*f.field(cfg) = *ints[name]
		}
	}
	for _, f := range synthFloatFlags {
		if f.name == name {
			*f.field(cfg) = float32(*floats[name])
		}
	}
	for _, f := range synthBoolFlags {
		if f.name == name {
			*f.field(cfg) = *bools[name]
		}
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// parseSize reads a byte count with an optional K, M or G suffix (powers
// of 1000, as llama-gguf-split's --split-max-size).
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1000
	case "M":
		mult = 1000 * 1000
	case "G":
		mult = 1000 * 1000 * 1000
	}
	digits := s
	if mult > 1 {
		digits = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
