// Package synth generates synthetic Kimi K3 (general.architecture =
// "kimi-k3") GGUF checkpoints: every tensor llama.cpp's kimi-k3 loader
// reads, with random but deterministic weights scaled so activations stay
// finite and O(1), a small byte-level BPE vocabulary, the published chat
// template, and llama-quantize's per-tensor type choice. Every k3 test that
// needs a model file gets it from here, so the files must load in llama.cpp.
package synth

import (
	"fmt"
	"slices"
)

// Config holds every dimension of a synthetic checkpoint. Field comments
// name the GGUF key each one becomes.
type Config struct {
	// Arch is the file's general.architecture: "" or Arch (kimi-k3),
	// ArchDeepSeek2 (with the fields of DeepSeek2) or ArchQwen3MoE (with
	// the GQA fields below; qwen3moe*.go).
	Arch string
	Name string // general.name

	NEmbd   int // embedding_length
	NLayer  int // block_count
	NHead   int // attention.head_count (KDA and MLA layers alike)
	NVocab  int // vocab_size; rows of token_embd and output
	NCtx    int // context_length
	RMSEps  float32
	NFF     int // feed_forward_length: width of the dense lead layers
	NDense  int // leading_dense_block_count
	ConvK   int // ssm.conv_kernel
	KDAHead int // kda.head_dim

	// MLA layers: a layer is MLA when it is listed in MLALayers; when
	// MLALayers is nil, when (il+1) % MLAEvery == 0 (the 1-indexed
	// full_attn_layers convention of the HF config), plus the last layer
	// if MLALast. Every other layer is KDA (head_count_kv 0).
	MLALayers []int
	MLAEvery  int
	MLALast   bool

	QLoRA   int // attention.q_lora_rank; 0 = direct attn_q
	KVLoRA  int // attention.kv_lora_rank
	QKNope  int // key_length_mla = QKNope + QKRope
	QKRope  int // rope.dimension_count (K3 is nope-only, but it sizes k_pe)
	VHead   int // value_length_mla
	MLAGate bool

	NExpert         int // expert_count
	NExpertUsed     int // expert_used_count
	NExpertShared   int // expert_shared_count; 0 = no shared expert tensors
	NFFExp          int // expert_feed_forward_length
	NLatent         int // expert_latent_length; 0 = routed experts at NEmbd, no ffn_routed_*
	RoutedNorm      bool
	ExpWeightsNorm  bool    // expert_weights_norm
	ExpWeightsScale float32 // expert_weights_scale
	GatingFunc      int     // expert_gating_func: 1 softmax, 2 sigmoid

	AttnResBlock   int     // attn_res.block_size; 0 = no attention residuals
	SituBeta       float32 // activation.situ_beta
	SituLinearBeta float32 // activation.situ_linear_beta
	// GateLowerBound is kda.gate_lower_bound; 0 leaves the key unset, which
	// selects the softplus decay-gate form (kimi-linear's).
	GateLowerBound float32

	DeepSeek2

	// RopeBase is rope.freq_base (deepseek2 and qwen3moe; kimi-k3's MLA is
	// nope-only).
	RopeBase float32

	// qwen3moe: GQA attention (qwen3moe.go)
	NHeadKV int // attention.head_count_kv
	HeadDim int // attention.key_length = value_length
	// ChatTemplate is qwen3moe's tokenizer.chat_template: "" for Qwen3's,
	// ChatTemplateQwen3Coder for Qwen3-Coder's.
	ChatTemplate string

	// Routing is how the routers behave: "" or RoutingRandom, or
	// RoutingRealistic (routing.go).
	Routing string

	Seed uint64
	Type OutType
}

// Presets names the built-in configurations.
var Presets = []string{"tiny", "k3"}

// Preset returns a named configuration.
func Preset(name string) (Config, error) {
	switch name {
	case "tiny":
		return tinyConfig(), nil
	case "k3":
		return k3Config(), nil
	}
	return Config{}, fmt.Errorf("synth: unknown preset %q (have %v)", name, Presets)
}

// Archs lists the architectures synth writes.
var Archs = []string{Arch, ArchDeepSeek2, ArchQwen3MoE}

// ArchPreset returns a named configuration of an architecture ("" is
// kimi-k3).
func ArchPreset(arch, name string) (Config, error) {
	switch arch {
	case "", Arch:
		return Preset(name)
	case ArchDeepSeek2:
		return deepseek2Preset(name)
	case ArchQwen3MoE:
		if c, ok := qwen3moePreset(name); ok {
			return c, nil
		}
		return Config{}, fmt.Errorf("synth: unknown %s preset %q (have %v)", arch, name, Qwen3MoEPresets)
	}
	return Config{}, fmt.Errorf("synth: unknown architecture %q (have %v)", arch, Archs)
}

// tinyConfig is a few MB: big enough that the main row lengths are
// multiples of 256 (so K-quants are used, not only their fallbacks), small
// enough to load and run in llama.cpp in well under a second.
func tinyConfig() Config {
	return Config{
		Name: "k3-synth-tiny", NEmbd: 256, NLayer: 4, NHead: 4, NVocab: 1024, NCtx: 4096,
		RMSEps: 1e-5, NFF: 512, NDense: 1, ConvK: 4, KDAHead: 32,
		MLAEvery: 2,
		QLoRA:    64, KVLoRA: 64, QKNope: 32, QKRope: 16, VHead: 32, MLAGate: true,
		NExpert: 8, NExpertUsed: 2, NExpertShared: 1, NFFExp: 256, NLatent: 128, RoutedNorm: true,
		ExpWeightsNorm: true, ExpWeightsScale: 2.5, GatingFunc: 2,
		AttnResBlock: 2, SituBeta: 4, SituLinearBeta: 25, GateLowerBound: -5,
		Seed: 1, Type: TypeF32,
	}
}

// k3Config is Kimi K3's shape (REFERENCE.md, llama-model.cpp). Dimensions
// the reference does not pin down follow Kimi K2 / Kimi Linear:
// q_lora_rank 1536, kv_lora_rank 512, qk 128+64, v 128, KDA head 128,
// conv kernel 4, dense FFN 18432, routed scale 2.827, and the 24 MLA layers
// taken as every 4th (1-indexed) plus the last.
func k3Config() Config {
	return Config{
		Name: "k3-synth", NEmbd: 7168, NLayer: 93, NHead: 96, NVocab: 163840, NCtx: 262144,
		RMSEps: 1e-5, NFF: 18432, NDense: 1, ConvK: 4, KDAHead: 128,
		MLAEvery: 4, MLALast: true,
		QLoRA: 1536, KVLoRA: 512, QKNope: 128, QKRope: 64, VHead: 128, MLAGate: true,
		NExpert: 896, NExpertUsed: 16, NExpertShared: 2, NFFExp: 3072, NLatent: 3584, RoutedNorm: true,
		ExpWeightsNorm: true, ExpWeightsScale: 2.827, GatingFunc: 2,
		AttnResBlock: 12, SituBeta: 4, SituLinearBeta: 25, GateLowerBound: -5,
		Seed: 1, Type: TypeQ2_K,
	}
}

// IsMLA reports whether layer il is an MLA (full attention) layer.
func (c *Config) IsMLA(il int) bool {
	if c.MLALayers != nil {
		return slices.Contains(c.MLALayers, il)
	}
	if c.MLALast && il == c.NLayer-1 {
		return true
	}
	return c.MLAEvery > 0 && (il+1)%c.MLAEvery == 0
}

// IsDense reports whether layer il has a dense FFN instead of experts.
func (c *Config) IsDense(il int) bool { return il < c.NDense }

// latent is the width the routed experts run at.
func (c *Config) latent() int {
	if c.NLatent > 0 {
		return c.NLatent
	}
	return c.NEmbd
}

// Validate rejects configurations llama.cpp's kimi-k3 loader or graph
// cannot run, and ones k3 cannot write.
func (c *Config) Validate() error {
	switch c.Arch {
	case ArchDeepSeek2:
		return c.validateDeepSeek2()
	case ArchQwen3MoE:
		return c.validateQwen3MoE()
	}
	if err := c.checkSizes(); err != nil {
		return err
	}
	return c.checkLayout()
}

func (c *Config) checkSizes() error {
	pos := []struct {
		name string
		v    int
	}{
		{"n_embd", c.NEmbd}, {"n_layer", c.NLayer}, {"n_head", c.NHead}, {"n_vocab", c.NVocab},
		{"n_ctx", c.NCtx}, {"conv_kernel", c.ConvK}, {"kda_head_dim", c.KDAHead},
		{"kv_lora_rank", c.KVLoRA}, {"qk_nope_head_dim", c.QKNope}, {"v_head_dim", c.VHead},
		{"n_expert", c.NExpert}, {"n_expert_used", c.NExpertUsed}, {"n_ff_exp", c.NFFExp},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("synth: %s must be positive, got %d", p.name, p.v)
		}
	}
	nonneg := []struct {
		name string
		v    int
	}{
		{"q_lora_rank", c.QLoRA}, {"qk_rope_head_dim", c.QKRope}, {"n_expert_shared", c.NExpertShared},
		{"n_latent", c.NLatent}, {"attn_res_block", c.AttnResBlock}, {"n_dense", c.NDense}, {"mla_every", c.MLAEvery},
	}
	for _, p := range nonneg {
		if p.v < 0 {
			return fmt.Errorf("synth: %s must not be negative, got %d", p.name, p.v)
		}
	}
	switch {
	case c.NLayer > 512: // LLAMA_MAX_LAYERS
		return fmt.Errorf("synth: n_layer %d exceeds llama.cpp's 512", c.NLayer)
	case c.NExpert > 1024: // LLAMA_MAX_EXPERTS
		return fmt.Errorf("synth: n_expert %d exceeds llama.cpp's 1024", c.NExpert)
	case c.NExpertUsed > c.NExpert:
		return fmt.Errorf("synth: n_expert_used %d > n_expert %d", c.NExpertUsed, c.NExpert)
	case c.NVocab < minVocab:
		return fmt.Errorf("synth: n_vocab %d is below the %d the vocabulary needs (bytes + control tokens)", c.NVocab, minVocab)
	case c.NDense > 0 && c.NFF <= 0:
		return fmt.Errorf("synth: %d dense lead layers need n_ff > 0", c.NDense)
	case c.NDense >= c.NLayer:
		return fmt.Errorf("synth: n_dense %d leaves no MoE layer of %d", c.NDense, c.NLayer)
	}
	return nil
}

func (c *Config) checkLayout() error {
	for _, il := range c.MLALayers {
		if il < 0 || il >= c.NLayer {
			return fmt.Errorf("synth: MLA layer %d out of range [0,%d)", il, c.NLayer)
		}
	}
	nMLA := 0
	for il := range c.NLayer {
		if c.IsMLA(il) {
			nMLA++
		}
	}
	switch {
	// llama.cpp's hybrid memory needs both kinds of layer.
	case nMLA == 0 || nMLA == c.NLayer:
		return fmt.Errorf("synth: need at least one KDA and one MLA layer, have %d MLA of %d", nMLA, c.NLayer)
	case c.GatingFunc != 1 && c.GatingFunc != 2:
		return fmt.Errorf("synth: gating func %d: want 1 (softmax) or 2 (sigmoid)", c.GatingFunc)
	case c.SituBeta <= 0:
		return fmt.Errorf("synth: situ beta must be positive, got %g", c.SituBeta)
	case c.GateLowerBound > 0:
		return fmt.Errorf("synth: gate lower bound must be <= 0, got %g", c.GateLowerBound)
	case !c.Type.valid():
		return fmt.Errorf("synth: unknown output type %d", c.Type)
	}
	return nil
}
