package synth

import (
	"crypto/sha256"
	"fmt"

	"github.com/k3-inference/k3/core/gguf"
)

// Arch is the general.architecture of every synthetic file.
const Arch = "kimi-k3"

// metadata returns the KVs of a file for cfg: the keys kimi-k3's
// convert_hf_to_gguf.py writes and llama.cpp's loader reads.
func metadata(cfg *Config, v *Vocab) []gguf.KV {
	switch cfg.Arch {
	case ArchDeepSeek2:
		return deepseek2Metadata(cfg, v)
	case ArchQwen3MoE:
		return qwen3moeMetadata(cfg, v)
	}
	a := func(k string) string { return Arch + "." + k }
	headKV := make([]int32, cfg.NLayer)
	for il := range headKV {
		if cfg.IsMLA(il) {
			headKV[il] = 1 // MLA is served as MQA over the compressed latent
		}
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str(Arch)},
		{Key: "general.name", Value: gguf.Str(cfg.Name)},
		{Key: "general.uuid", Value: gguf.Str(modelUUID(cfg))},
		{Key: "general.file_type", Value: gguf.U32(cfg.Type.FileType())},
		{Key: "general.quantization_version", Value: gguf.U32(2)},
		{Key: a("vocab_size"), Value: gguf.U32(uint32(cfg.NVocab))},
		{Key: a("context_length"), Value: gguf.U32(uint32(cfg.NCtx))},
		{Key: a("embedding_length"), Value: gguf.U32(uint32(cfg.NEmbd))},
		{Key: a("block_count"), Value: gguf.U32(uint32(cfg.NLayer))},
		{Key: a("feed_forward_length"), Value: gguf.U32(uint32(cfg.NFF))},
		{Key: a("attention.head_count"), Value: gguf.U32(uint32(cfg.NHead))},
		{Key: a("attention.head_count_kv"), Value: gguf.I32s(headKV)},
		{Key: a("attention.layer_norm_rms_epsilon"), Value: gguf.F32(cfg.RMSEps)},
		{Key: a("ssm.conv_kernel"), Value: gguf.U32(uint32(cfg.ConvK))},
		{Key: a("kda.head_dim"), Value: gguf.U32(uint32(cfg.KDAHead))},
	}
	if cfg.GateLowerBound != 0 {
		kvs = append(kvs, gguf.KV{Key: a("kda.gate_lower_bound"), Value: gguf.F32(cfg.GateLowerBound)})
	}
	if cfg.QLoRA > 0 {
		kvs = append(kvs, gguf.KV{Key: a("attention.q_lora_rank"), Value: gguf.U32(uint32(cfg.QLoRA))})
	}
	kvs = append(kvs,
		gguf.KV{Key: a("attention.kv_lora_rank"), Value: gguf.U32(uint32(cfg.KVLoRA))},
		gguf.KV{Key: a("rope.dimension_count"), Value: gguf.U32(uint32(cfg.QKRope))},
		gguf.KV{Key: a("attention.key_length"), Value: gguf.U32(uint32(cfg.KVLoRA + cfg.QKRope))},
		gguf.KV{Key: a("attention.value_length"), Value: gguf.U32(uint32(cfg.KVLoRA))},
		gguf.KV{Key: a("attention.key_length_mla"), Value: gguf.U32(uint32(cfg.QKNope + cfg.QKRope))},
		gguf.KV{Key: a("attention.value_length_mla"), Value: gguf.U32(uint32(cfg.VHead))},
		gguf.KV{Key: a("expert_count"), Value: gguf.U32(uint32(cfg.NExpert))},
		gguf.KV{Key: a("expert_used_count"), Value: gguf.U32(uint32(cfg.NExpertUsed))},
		gguf.KV{Key: a("expert_feed_forward_length"), Value: gguf.U32(uint32(cfg.NFFExp))},
		gguf.KV{Key: a("expert_shared_count"), Value: gguf.U32(uint32(cfg.NExpertShared))},
		gguf.KV{Key: a("leading_dense_block_count"), Value: gguf.U32(uint32(cfg.NDense))},
		gguf.KV{Key: a("expert_weights_scale"), Value: gguf.F32(cfg.ExpWeightsScale)},
		gguf.KV{Key: a("expert_weights_norm"), Value: gguf.Bool(cfg.ExpWeightsNorm)},
		gguf.KV{Key: a("expert_gating_func"), Value: gguf.U32(uint32(cfg.GatingFunc))},
	)
	if cfg.NLatent > 0 {
		kvs = append(kvs, gguf.KV{Key: a("expert_latent_length"), Value: gguf.U32(uint32(cfg.NLatent))})
	}
	kvs = append(kvs,
		gguf.KV{Key: a("activation.situ_beta"), Value: gguf.F32(cfg.SituBeta)},
		gguf.KV{Key: a("activation.situ_linear_beta"), Value: gguf.F32(cfg.SituLinearBeta)},
		gguf.KV{Key: a("attn_res.block_size"), Value: gguf.U32(uint32(cfg.AttnResBlock))},

		gguf.KV{Key: "tokenizer.ggml.model", Value: gguf.Str("gpt2")},
		gguf.KV{Key: "tokenizer.ggml.pre", Value: gguf.Str("kimi-k2")},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: gguf.Strs(v.Tokens)},
		gguf.KV{Key: "tokenizer.ggml.token_type", Value: gguf.I32s(v.Types)},
		gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.Strs(v.Merges)},
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: gguf.U32(v.BOS)},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: gguf.U32(v.EOS)},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: gguf.U32(v.PAD)},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(false)},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: gguf.Bool(false)},
		gguf.KV{Key: "tokenizer.chat_template", Value: gguf.Str(ChatTemplate)},
	)
	return kvs
}

// modelUUID names the model cfg describes (seed included), the same on
// every run: the split writer copies it onto every shard, so a shard of
// another synthetic model with the same shapes is refused at load.
// It is an RFC 9562 version 8 (custom) UUID over a hash of cfg.
func modelUUID(cfg *Config) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("k3 synth %+v", *cfg)))
	h[6] = h[6]&0x0f | 0x80
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
