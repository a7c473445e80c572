package synth

import (
	_ "embed"
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/gguf"
)

// ArchDeepSeek2 is llama.cpp's architecture of DeepSeek V2/V3/R1 and Kimi K2.
const ArchDeepSeek2 = "deepseek2"

// DeepSeek2 holds what only deepseek2 files have (Config.Arch ==
// ArchDeepSeek2); the shared fields (widths, MLA ranks, experts, gating,
// weight norm and scale) mean what they mean for kimi-k3. A deepseek2
// file has no KDA layers: every layer is MLA.
type DeepSeek2 struct {
	// KVB writes the legacy attn_kv_b layout (no *_mla head sizes)
	// instead of attn_k_b/attn_v_b.
	KVB bool
	// ProbsBias writes exp_probs_b (DeepSeek V3's selection bias).
	ProbsBias bool
	// ExpertGroups and ExpertGroupsUsed are expert_group_count and
	// expert_group_used_count (0: not written).
	ExpertGroups, ExpertGroupsUsed int
	// YarnFactor is rope.scaling.factor with type yarn (0: no scaling);
	// YarnOrigCtx its original context; YarnMscaleAllDim the HF
	// mscale_all_dim, written as rope.scaling.yarn_log_multiplier = 0.1×it
	// (0: not written).
	YarnFactor       float32
	YarnOrigCtx      int
	YarnMscaleAllDim float32
	// Tokenizer is the pre-tokenizer and special-token set: "deepseek-v3"
	// or "kimi-k2".
	Tokenizer string
}

// DeepSeek V3's chat template (its V3.1 revision, the newest llama.cpp
// ships for V3) and Kimi K2's, byte for byte from the reference's
// models/templates; model data, not k3 code.
var (
	//go:embed deepseek-v3.jinja
	DeepSeekV3Template string
	//go:embed kimi-k2.jinja
	KimiK2Template string
)

// deepseek2Presets are the deepseek2 configurations: "tiny" (a V3-like
// few-MB file: q LoRA, groups, sigmoid with bias, YaRN) and the real
// shapes of Kimi K2 and DeepSeek V3.
var deepseek2Presets = []string{"tiny", "kimi-k2", "deepseek-v3"}

func deepseek2Preset(name string) (Config, error) {
	switch name {
	case "tiny":
		return Config{
			Arch: ArchDeepSeek2, Name: "deepseek2-synth-tiny", NEmbd: 256, NLayer: 4, NHead: 4, NVocab: 1024, NCtx: 4096,
			RMSEps: 1e-6, NFF: 512, NDense: 1,
			QLoRA: 64, KVLoRA: 64, QKNope: 32, QKRope: 16, VHead: 32,
			NExpert: 16, NExpertUsed: 4, NExpertShared: 1, NFFExp: 256,
			ExpWeightsNorm: true, ExpWeightsScale: 2.5, GatingFunc: 2,
			RopeBase: 10000,
			DeepSeek2: DeepSeek2{ProbsBias: true, ExpertGroups: 4, ExpertGroupsUsed: 2,
				YarnFactor: 40, YarnOrigCtx: 256, YarnMscaleAllDim: 1, Tokenizer: "deepseek-v3"},
			Seed: 1, Type: TypeF32,
		}, nil
	case "kimi-k2":
		// moonshotai/Kimi-K2-Instruct config.json
		return Config{
			Arch: ArchDeepSeek2, Name: "kimi-k2-synth", NEmbd: 7168, NLayer: 61, NHead: 64, NVocab: 163840, NCtx: 131072,
			RMSEps: 1e-6, NFF: 18432, NDense: 1,
			QLoRA: 1536, KVLoRA: 512, QKNope: 128, QKRope: 64, VHead: 128,
			NExpert: 384, NExpertUsed: 8, NExpertShared: 1, NFFExp: 2048,
			ExpWeightsNorm: true, ExpWeightsScale: 2.827, GatingFunc: 2,
			RopeBase: 50000,
			DeepSeek2: DeepSeek2{ProbsBias: true,
				YarnFactor: 32, YarnOrigCtx: 4096, YarnMscaleAllDim: 1, Tokenizer: "kimi-k2"},
			Seed: 1, Type: TypeQ2_K,
		}, nil
	case "deepseek-v3":
		// deepseek-ai/DeepSeek-V3 config.json
		return Config{
			Arch: ArchDeepSeek2, Name: "deepseek-v3-synth", NEmbd: 7168, NLayer: 61, NHead: 128, NVocab: 129280, NCtx: 163840,
			RMSEps: 1e-6, NFF: 18432, NDense: 3,
			QLoRA: 1536, KVLoRA: 512, QKNope: 128, QKRope: 64, VHead: 128,
			NExpert: 256, NExpertUsed: 8, NExpertShared: 1, NFFExp: 2048,
			ExpWeightsNorm: true, ExpWeightsScale: 2.5, GatingFunc: 2,
			RopeBase: 10000,
			DeepSeek2: DeepSeek2{ProbsBias: true, ExpertGroups: 8, ExpertGroupsUsed: 4,
				YarnFactor: 40, YarnOrigCtx: 4096, YarnMscaleAllDim: 1, Tokenizer: "deepseek-v3"},
			Seed: 1, Type: TypeQ2_K,
		}, nil
	}
	return Config{}, fmt.Errorf("synth: unknown deepseek2 preset %q (have %v)", name, deepseek2Presets)
}

// validateDeepSeek2 rejects configurations llama.cpp's deepseek2 loader or
// graph cannot run, and ones k3 cannot write.
func (c *Config) validateDeepSeek2() error {
	pos := []struct {
		name string
		v    int
	}{
		{"n_embd", c.NEmbd}, {"n_layer", c.NLayer}, {"n_head", c.NHead}, {"n_vocab", c.NVocab}, {"n_ctx", c.NCtx},
		{"kv_lora_rank", c.KVLoRA}, {"qk_nope_head_dim", c.QKNope}, {"qk_rope_head_dim", c.QKRope}, {"v_head_dim", c.VHead},
		{"n_expert", c.NExpert}, {"n_expert_used", c.NExpertUsed}, {"n_expert_shared", c.NExpertShared}, {"n_ff_exp", c.NFFExp},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("synth: %s must be positive, got %d", p.name, p.v)
		}
	}
	lite := c.NLayer == 26 || c.NLayer == 27
	switch {
	case c.QLoRA < 0 || c.NDense < 0:
		return fmt.Errorf("synth: q_lora_rank %d, n_dense %d must not be negative", c.QLoRA, c.NDense)
	case c.QLoRA == 0 && !lite:
		// llama.cpp requires attention.q_lora_rank unless the layer count
		// marks a "lite" model (V2-Lite has 27)
		return fmt.Errorf("synth: a deepseek2 file without q LoRA must have 26 or 27 layers (llama.cpp's lite models), have %d", c.NLayer)
	case c.QKRope%2 != 0:
		return fmt.Errorf("synth: qk_rope_head_dim %d must be even", c.QKRope)
	case c.NLayer > 512:
		return fmt.Errorf("synth: n_layer %d exceeds llama.cpp's 512", c.NLayer)
	case c.NExpert > 1024:
		return fmt.Errorf("synth: n_expert %d exceeds llama.cpp's 1024", c.NExpert)
	case c.NExpertUsed > c.NExpert:
		return fmt.Errorf("synth: n_expert_used %d > n_expert %d", c.NExpertUsed, c.NExpert)
	case c.NDense > 0 && c.NFF <= 0:
		return fmt.Errorf("synth: %d dense lead layers need n_ff > 0", c.NDense)
	case c.NDense >= c.NLayer:
		return fmt.Errorf("synth: n_dense %d leaves no MoE layer of %d", c.NDense, c.NLayer)
	case c.GatingFunc != 1 && c.GatingFunc != 2:
		return fmt.Errorf("synth: gating func %d: want 1 (softmax) or 2 (sigmoid)", c.GatingFunc)
	case c.RopeBase <= 0:
		return fmt.Errorf("synth: rope base %g must be positive", c.RopeBase)
	case c.YarnFactor < 0 || (c.YarnFactor > 0 && c.YarnOrigCtx <= 0):
		return fmt.Errorf("synth: YaRN factor %g needs a positive original context, have %d", c.YarnFactor, c.YarnOrigCtx)
	case c.Tokenizer != "deepseek-v3" && c.Tokenizer != "kimi-k2":
		return fmt.Errorf("synth: tokenizer %q: want deepseek-v3 or kimi-k2", c.Tokenizer)
	case !c.Type.valid():
		return fmt.Errorf("synth: unknown output type %d", c.Type)
	case c.NVocab < 256+len(deepseek2Specials(c.Tokenizer).tokens):
		return fmt.Errorf("synth: n_vocab %d is below the %d the vocabulary needs", c.NVocab, 256+len(deepseek2Specials(c.Tokenizer).tokens))
	}
	if g, u := c.ExpertGroups, c.ExpertGroupsUsed; g > 1 {
		switch {
		case c.NExpert%g != 0:
			return fmt.Errorf("synth: %d experts do not split into %d groups", c.NExpert, g)
		case u <= 0 || u >= g:
			return fmt.Errorf("synth: %d groups used of %d", u, g)
		case c.NExpert/g < 2:
			return fmt.Errorf("synth: groups of %d experts; llama.cpp scores a group by its best two", c.NExpert/g)
		case u*(c.NExpert/g) < c.NExpertUsed:
			return fmt.Errorf("synth: %d groups of %d experts cannot supply %d experts", u, c.NExpert/g, c.NExpertUsed)
		}
	}
	return nil
}

// deepseek2Defs lists every tensor of a deepseek2 file, as llama.cpp's
// deepseek2 loader reads them (and DeepseekV2Model's converter writes
// them).
func deepseek2Defs(cfg *Config, add adder) {
	E, V, H := int64(cfg.NEmbd), int64(cfg.NVocab), int64(cfg.NHead)
	nK, kv, vd, nope := int64(cfg.QKNope+cfg.QKRope), int64(cfg.KVLoRA), int64(cfg.VHead), int64(cfg.QKNope)
	add("token_embd.weight", std(1), E, V)
	add("output_norm.weight", norm, E)
	add("output.weight", fanIn(cfg.NEmbd), E, V)
	for il := range cfg.NLayer {
		la := func(s string, init initDist, shape ...int64) { add(fmt.Sprintf("blk.%d.%s", il, s), init, shape...) }
		la("attn_norm.weight", norm, E)
		la("ffn_norm.weight", norm, E)
		if cfg.QLoRA > 0 {
			la("attn_q_a_norm.weight", norm, int64(cfg.QLoRA))
			la("attn_q_a.weight", fanIn(cfg.NEmbd), E, int64(cfg.QLoRA))
			la("attn_q_b.weight", fanIn(cfg.QLoRA), int64(cfg.QLoRA), H*nK)
		} else {
			la("attn_q.weight", fanIn(cfg.NEmbd), E, H*nK)
		}
		la("attn_kv_a_mqa.weight", fanIn(cfg.NEmbd), E, kv+int64(cfg.QKRope))
		la("attn_kv_a_norm.weight", norm, kv)
		if cfg.KVB {
			la("attn_kv_b.weight", fanIn(cfg.KVLoRA), kv, H*(nope+vd))
		} else {
			la("attn_k_b.weight", fanIn(cfg.QKNope), nope, kv, H)
			la("attn_v_b.weight", fanIn(cfg.KVLoRA), kv, vd, H)
		}
		la("attn_output.weight", branchOut(cfg, cfg.NHead*cfg.VHead), H*vd, E)
		if cfg.IsDense(il) {
			la("ffn_gate.weight", fanIn(cfg.NEmbd), E, int64(cfg.NFF))
			la("ffn_up.weight", fanIn(cfg.NEmbd), E, int64(cfg.NFF))
			la("ffn_down.weight", branchOut(cfg, cfg.NFF), int64(cfg.NFF), E)
			continue
		}
		X, F := int64(cfg.NExpert), int64(cfg.NFFExp)
		la("ffn_gate_inp.weight", std(1.5/math.Sqrt(float64(E))), E, X)
		if cfg.ProbsBias {
			la("exp_probs_b.bias", initDist{Lo: -0.1, Hi: 0.1}, X)
		}
		la("ffn_gate_exps.weight", fanIn(cfg.NEmbd), E, F, X)
		la("ffn_up_exps.weight", fanIn(cfg.NEmbd), E, F, X)
		la("ffn_down_exps.weight", branchOut(cfg, int(F)), F, E, X)
		S := F * int64(cfg.NExpertShared)
		la("ffn_gate_shexp.weight", fanIn(cfg.NEmbd), E, S)
		la("ffn_up_shexp.weight", fanIn(cfg.NEmbd), E, S)
		la("ffn_down_shexp.weight", branchOut(cfg, int(S)), S, E)
	}
}

// deepseek2Metadata is what DeepseekV2Model's converter writes (for
// KVB, what the converter wrote before the attn_kv_b split).
func deepseek2Metadata(cfg *Config, v *Vocab) []gguf.KV {
	a := func(k string) string { return ArchDeepSeek2 + "." + k }
	u := func(k string, x int) gguf.KV { return gguf.KV{Key: a(k), Value: gguf.U32(uint32(x))} }
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str(ArchDeepSeek2)},
		{Key: "general.name", Value: gguf.Str(cfg.Name)},
		{Key: "general.uuid", Value: gguf.Str(modelUUID(cfg))},
		{Key: "general.file_type", Value: gguf.U32(cfg.Type.FileType())},
		{Key: "general.quantization_version", Value: gguf.U32(2)},
		u("block_count", cfg.NLayer), u("context_length", cfg.NCtx), u("embedding_length", cfg.NEmbd),
		u("feed_forward_length", cfg.NFF), u("attention.head_count", cfg.NHead),
	}
	nK := cfg.QKNope + cfg.QKRope
	if cfg.KVB {
		kvs = append(kvs, u("attention.head_count_kv", cfg.NHead))
	} else {
		kvs = append(kvs, u("attention.head_count_kv", 1)) // MLA is served as MQA over the latent
	}
	kvs = append(kvs,
		gguf.KV{Key: a("rope.freq_base"), Value: gguf.F32(cfg.RopeBase)},
		gguf.KV{Key: a("attention.layer_norm_rms_epsilon"), Value: gguf.F32(cfg.RMSEps)},
		u("expert_used_count", cfg.NExpertUsed),
	)
	if cfg.ExpertGroups > 0 {
		kvs = append(kvs, u("expert_group_count", cfg.ExpertGroups), u("expert_group_used_count", cfg.ExpertGroupsUsed))
	}
	kvs = append(kvs, gguf.KV{Key: a("expert_gating_func"), Value: gguf.U32(uint32(cfg.GatingFunc))})
	if cfg.YarnFactor > 0 {
		kvs = append(kvs,
			gguf.KV{Key: a("rope.scaling.type"), Value: gguf.Str("yarn")},
			gguf.KV{Key: a("rope.scaling.factor"), Value: gguf.F32(cfg.YarnFactor)},
			u("rope.scaling.original_context_length", cfg.YarnOrigCtx),
		)
	}
	kvs = append(kvs, u("leading_dense_block_count", cfg.NDense), u("vocab_size", cfg.NVocab))
	if cfg.QLoRA > 0 {
		kvs = append(kvs, u("attention.q_lora_rank", cfg.QLoRA))
	}
	kvs = append(kvs, u("attention.kv_lora_rank", cfg.KVLoRA))
	if cfg.KVB {
		kvs = append(kvs, u("attention.key_length", nK), u("attention.value_length", cfg.VHead))
	} else {
		kvs = append(kvs, u("attention.key_length", cfg.KVLoRA+cfg.QKRope), u("attention.value_length", cfg.KVLoRA),
			u("attention.key_length_mla", nK), u("attention.value_length_mla", cfg.VHead))
	}
	kvs = append(kvs, u("expert_feed_forward_length", cfg.NFFExp), u("expert_count", cfg.NExpert),
		u("expert_shared_count", cfg.NExpertShared))
	if cfg.ExpWeightsScale != 0 {
		kvs = append(kvs, gguf.KV{Key: a("expert_weights_scale"), Value: gguf.F32(cfg.ExpWeightsScale)})
	}
	if cfg.ExpWeightsNorm {
		kvs = append(kvs, gguf.KV{Key: a("expert_weights_norm"), Value: gguf.Bool(true)})
	}
	kvs = append(kvs, u("rope.dimension_count", cfg.QKRope))
	if cfg.YarnFactor > 0 && cfg.YarnMscaleAllDim != 0 {
		kvs = append(kvs, gguf.KV{Key: a("rope.scaling.yarn_log_multiplier"), Value: gguf.F32(float32(0.1 * float64(cfg.YarnMscaleAllDim)))})
	}
	sp := deepseek2Specials(cfg.Tokenizer)
	kvs = append(kvs,
		gguf.KV{Key: "tokenizer.ggml.model", Value: gguf.Str("gpt2")},
		gguf.KV{Key: "tokenizer.ggml.pre", Value: gguf.Str(cfg.Tokenizer)},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: gguf.Strs(v.Tokens)},
		gguf.KV{Key: "tokenizer.ggml.token_type", Value: gguf.I32s(v.Types)},
		gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.Strs(v.Merges)},
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: gguf.U32(v.BOS)},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: gguf.U32(v.EOS)},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: gguf.U32(v.PAD)},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(sp.addBOS)},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: gguf.Bool(false)},
		gguf.KV{Key: "tokenizer.chat_template", Value: gguf.Str(sp.template)},
	)
	return kvs
}

// specials is a tokenizer's control tokens and chat setup.
type specials struct {
	tokens        []string
	bos, eos, pad string
	addBOS        bool
	template      string
}

// deepseek2Specials are the control tokens of DeepSeek V3's and Kimi K2's
// tokenizers that their chat templates and llama.cpp's chat parsers use.
func deepseek2Specials(tok string) specials {
	if tok == "kimi-k2" {
		return specials{
			tokens: []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
				"<|end_header_id|>", "[EOT]", "<|im_system|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
				"<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|im_middle|>", "[UNK]", "[PAD]",
				"<think>", "</think>"},
			bos: "[BOS]", eos: "<|im_end|>", pad: "[PAD]", template: KimiK2Template,
		}
	}
	return specials{
		tokens: []string{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>",
			"<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
			"<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
			"<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"},
		bos: "<｜begin▁of▁sentence｜>", eos: "<｜end▁of▁sentence｜>", pad: "<｜▁pad▁｜>", addBOS: true, template: DeepSeekV3Template,
	}
}

func deepseek2Vocab(cfg *Config) (*Vocab, error) {
	sp := deepseek2Specials(cfg.Tokenizer)
	return newVocab(cfg.NVocab, sp.tokens, sp.bos, sp.eos, sp.pad)
}
