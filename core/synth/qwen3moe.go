package synth

import (
	_ "embed"
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/gguf"
)

// ArchQwen3MoE is llama.cpp's architecture of Qwen3's MoE checkpoints
// (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-480B-A35B).
const ArchQwen3MoE = "qwen3moe"

// ChatTemplateQwen3Coder is Config.ChatTemplate for Qwen3-Coder's template.
const ChatTemplateQwen3Coder = "qwen3-coder"

// Qwen3ChatTemplate is Qwen3's published chat template, byte for byte as
// llama.cpp ships it (models/templates/Qwen-Qwen3-0.6B.jinja, the template
// of every Qwen3 MoE release but Qwen3-Coder). Model data, not k3 code.
//
//go:embed qwen3.jinja
var Qwen3ChatTemplate string

// Qwen3CoderChatTemplate is Qwen3-Coder's chat template, byte for byte as
// llama.cpp ships it (models/templates/Qwen3-Coder.jinja): tool calls as
// <function=NAME> with one <parameter=KEY> per argument. Model data, not
// k3 code.
//
//go:embed qwen3-coder.jinja
var Qwen3CoderChatTemplate string

// Qwen3MoEPresets names the qwen3moe configurations ArchPreset accepts.
var Qwen3MoEPresets = []string{"tiny", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-coder-480b-a35b"}

// qwen3moePreset returns a named qwen3moe configuration: tiny (a few MB,
// GQA 4, 16 experts) or a released model's shape (its config.json).
func qwen3moePreset(name string) (Config, bool) {
	c := Config{
		Arch: ArchQwen3MoE, NVocab: 151936, NCtx: 40960, RMSEps: 1e-6, RopeBase: 1e6,
		HeadDim: 128, NExpert: 128, NExpertUsed: 8, ExpWeightsNorm: true, Seed: 1, Type: TypeQ4_K_M,
	}
	switch name {
	case "tiny":
		c.Name, c.NEmbd, c.NLayer, c.NHead, c.NHeadKV, c.HeadDim = "qwen3moe-synth-tiny", 256, 4, 8, 2, 64
		c.NVocab, c.NCtx, c.NFF, c.NExpert, c.NExpertUsed, c.NFFExp = 1024, 4096, 512, 16, 4, 256
		c.Type = TypeF32
	case "qwen3-30b-a3b":
		c.Name, c.NEmbd, c.NLayer, c.NHead, c.NHeadKV = "qwen3-30b-a3b-synth", 2048, 48, 32, 4
		c.NFF, c.NFFExp = 6144, 768
	case "qwen3-235b-a22b":
		c.Name, c.NEmbd, c.NLayer, c.NHead, c.NHeadKV = "qwen3-235b-a22b-synth", 4096, 94, 64, 4
		c.NFF, c.NFFExp = 12288, 1536
	case "qwen3-coder-480b-a35b":
		c.Name, c.NEmbd, c.NLayer, c.NHead, c.NHeadKV = "qwen3-coder-480b-a35b-synth", 6144, 62, 96, 8
		c.NFF, c.NFFExp, c.NExpert, c.NCtx, c.RopeBase = 8192, 2560, 160, 262144, 1e7
		c.ChatTemplate = ChatTemplateQwen3Coder
	default:
		return Config{}, false
	}
	return c, true
}

func (c *Config) validateQwen3MoE() error {
	for _, p := range []struct {
		name string
		v    int
	}{
		{"n_embd", c.NEmbd}, {"n_layer", c.NLayer}, {"n_head", c.NHead}, {"n_head_kv", c.NHeadKV},
		{"head_dim", c.HeadDim}, {"n_vocab", c.NVocab}, {"n_ctx", c.NCtx}, {"n_expert", c.NExpert},
		{"n_expert_used", c.NExpertUsed}, {"n_ff_exp", c.NFFExp},
	} {
		if p.v <= 0 {
			return fmt.Errorf("synth: %s must be positive, got %d", p.name, p.v)
		}
	}
	switch {
	case c.NLayer > 512:
		return fmt.Errorf("synth: n_layer %d exceeds llama.cpp's 512", c.NLayer)
	case c.NExpert > 1024:
		return fmt.Errorf("synth: n_expert %d exceeds llama.cpp's 1024", c.NExpert)
	case c.NExpertUsed > c.NExpert:
		return fmt.Errorf("synth: n_expert_used %d > n_expert %d", c.NExpertUsed, c.NExpert)
	case c.NHead%c.NHeadKV != 0:
		return fmt.Errorf("synth: n_head_kv %d does not divide n_head %d", c.NHeadKV, c.NHead)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("synth: head_dim %d is odd (rope turns pairs)", c.HeadDim)
	case c.RopeBase <= 1:
		return fmt.Errorf("synth: rope freq base %g must exceed 1", c.RopeBase)
	case c.NVocab < minVocab256(len(qwenSpecials)):
		return fmt.Errorf("synth: n_vocab %d is below the %d the vocabulary needs", c.NVocab, minVocab256(len(qwenSpecials)))
	case !c.Type.valid():
		return fmt.Errorf("synth: unknown output type %d", c.Type)
	case c.ChatTemplate != "" && c.ChatTemplate != ChatTemplateQwen3Coder:
		return fmt.Errorf("synth: chat template %q: want %q or none (Qwen3's)", c.ChatTemplate, ChatTemplateQwen3Coder)
	}
	return nil
}

func minVocab256(specials int) int { return 256 + specials }

// qwen3moeTensorDefs lists the tensors llama.cpp's qwen3moe loader reads,
// shaped and initialised as tensorDefs does for kimi-k3.
func qwen3moeTensorDefs(cfg *Config) []tensorDef {
	var defs []tensorDef
	add := func(name string, init initDist, shape ...int64) {
		defs = append(defs, tensorDef{Name: name, Shape: shape, Init: init})
	}
	E, V, D := int64(cfg.NEmbd), int64(cfg.NVocab), int64(cfg.HeadDim)
	Q, KV := int64(cfg.NHead)*D, int64(cfg.NHeadKV)*D
	X, F := int64(cfg.NExpert), int64(cfg.NFFExp)
	add("token_embd.weight", std(1), E, V)
	add("output_norm.weight", norm, E)
	add("output.weight", fanIn(cfg.NEmbd), E, V)
	for il := range cfg.NLayer {
		la := func(s string, init initDist, shape ...int64) { add(fmt.Sprintf("blk.%d.%s", il, s), init, shape...) }
		la("attn_norm.weight", norm, E)
		la("attn_q.weight", fanIn(cfg.NEmbd), E, Q)
		la("attn_k.weight", fanIn(cfg.NEmbd), E, KV)
		la("attn_v.weight", fanIn(cfg.NEmbd), E, KV)
		la("attn_q_norm.weight", norm, D)
		la("attn_k_norm.weight", norm, D)
		la("attn_output.weight", branchOut(cfg, int(Q)), Q, E)
		la("ffn_norm.weight", norm, E)
		// router logits ~ N(0, 1.5^2): the softmax spreads, so the chosen
		// experts differ from token to token
		la("ffn_gate_inp.weight", std(1.5/math.Sqrt(float64(E))), E, X)
		la("ffn_gate_exps.weight", fanIn(cfg.NEmbd), E, F, X)
		la("ffn_up_exps.weight", fanIn(cfg.NEmbd), E, F, X)
		la("ffn_down_exps.weight", branchOut(cfg, int(F)), F, E, X)
	}
	return defs
}

// qwen3moeMetadata is what convert_hf_to_gguf.py (Qwen3MoeModel) writes.
// It writes neither expert_weights_norm nor a gating function: llama.cpp's
// qwen3moe graph always normalises the softmax top-k weights.
func qwen3moeMetadata(cfg *Config, v *Vocab) []gguf.KV {
	a := func(k string) string { return ArchQwen3MoE + "." + k }
	return []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str(ArchQwen3MoE)},
		{Key: "general.name", Value: gguf.Str(cfg.Name)},
		{Key: "general.uuid", Value: gguf.Str(modelUUID(cfg))},
		{Key: a("block_count"), Value: gguf.U32(uint32(cfg.NLayer))},
		{Key: a("context_length"), Value: gguf.U32(uint32(cfg.NCtx))},
		{Key: a("embedding_length"), Value: gguf.U32(uint32(cfg.NEmbd))},
		{Key: a("feed_forward_length"), Value: gguf.U32(uint32(cfg.NFF))},
		{Key: a("attention.head_count"), Value: gguf.U32(uint32(cfg.NHead))},
		{Key: a("attention.head_count_kv"), Value: gguf.U32(uint32(cfg.NHeadKV))},
		{Key: a("rope.freq_base"), Value: gguf.F32(cfg.RopeBase)},
		{Key: a("attention.layer_norm_rms_epsilon"), Value: gguf.F32(cfg.RMSEps)},
		{Key: a("expert_used_count"), Value: gguf.U32(uint32(cfg.NExpertUsed))},
		{Key: a("expert_count"), Value: gguf.U32(uint32(cfg.NExpert))},
		{Key: a("attention.key_length"), Value: gguf.U32(uint32(cfg.HeadDim))},
		{Key: a("attention.value_length"), Value: gguf.U32(uint32(cfg.HeadDim))},
		{Key: "general.file_type", Value: gguf.U32(cfg.Type.FileType())},
		{Key: a("expert_feed_forward_length"), Value: gguf.U32(uint32(cfg.NFFExp))},
		{Key: "general.quantization_version", Value: gguf.U32(2)},

		{Key: "tokenizer.ggml.model", Value: gguf.Str("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.Str("qwen2")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strs(v.Tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.I32s(v.Types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Strs(v.Merges)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.U32(v.EOS)},
		{Key: "tokenizer.ggml.padding_token_id", Value: gguf.U32(v.PAD)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.U32(v.BOS)},
		{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(false)},
		{Key: "tokenizer.chat_template", Value: gguf.Str(qwen3moeTemplate(cfg))},
	}
}

// qwen3moeTemplate is the chat template the configuration names.
func qwen3moeTemplate(cfg *Config) string {
	if cfg.ChatTemplate == ChatTemplateQwen3Coder {
		return Qwen3CoderChatTemplate
	}
	return Qwen3ChatTemplate
}
