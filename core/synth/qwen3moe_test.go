package synth

import (
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// TestQwen3MoEPresets: the released shapes plan the tensors llama.cpp's
// qwen3moe loader reads, with llama-quantize's Q4_K_M choices (attn_v and
// ffn_down_exps Q6_K on the use_more_bits layers, Q4_K elsewhere, the
// output Q6_K, norms and router F32).
func TestQwen3MoEPresets(t *testing.T) {
	for _, name := range Qwen3MoEPresets {
		c, err := ArchPreset(ArchQwen3MoE, name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "tiny" {
			c.Type = TypeQ4_K_M
		}
		specs, err := Plan(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := 3 + 12*c.NLayer; len(specs) != want {
			t.Errorf("%s: %d tensors, want %d", name, len(specs), want)
		}
		types := map[string]quant.Type{}
		for _, s := range specs {
			types[s.Name] = s.Type
		}
		for tensor, want := range map[string]quant.Type{
			"output.weight": quant.Q6_K, "token_embd.weight": quant.Q4_K,
			"blk.0.attn_v.weight": quant.Q6_K, "blk.0.ffn_down_exps.weight": quant.Q6_K,
			"blk.1.attn_q.weight": quant.Q4_K, "blk.0.ffn_gate_exps.weight": quant.Q4_K,
			"blk.0.attn_q_norm.weight": quant.F32, "blk.0.ffn_gate_inp.weight": quant.F32,
		} {
			if name == "tiny" && (tensor == "blk.0.attn_v.weight" || tensor == "blk.0.ffn_down_exps.weight") {
				want = quant.Q4_K // use_more_bits(0, 4) is false
			}
			if types[tensor] != want {
				t.Errorf("%s: %s is %s, want %s", name, tensor, types[tensor], want)
			}
		}
	}
	if _, err := ArchPreset(ArchQwen3MoE, "k3"); err == nil {
		t.Error("kimi-k3 preset accepted for qwen3moe")
	}
	if _, err := ArchPreset("llama", "tiny"); err == nil {
		t.Error("unknown architecture accepted")
	}
}

// TestQwenVocab: Qwen's added tokens sit at their released ids in a full
// vocabulary (after the normal tokens otherwise), typed control or
// user-defined as the HF tokenizer marks them; eos is <|im_end|>.
func TestQwenVocab(t *testing.T) {
	for _, tc := range []struct{ n, base int }{{151936, 151643}, {1024, 1024 - len(qwenSpecials)}} {
		v, err := newQwenVocab(tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Tokens) != tc.n || len(v.Types) != tc.n {
			t.Fatalf("n=%d: %d tokens", tc.n, len(v.Tokens))
		}
		for tok, want := range map[string]struct {
			id  int
			typ int32
		}{
			"<|endoftext|>": {tc.base, TokenControl}, "<|im_start|>": {tc.base + 1, TokenControl},
			"<|im_end|>": {tc.base + 2, TokenControl}, "<tool_call>": {tc.base + 14, TokenUserDefined},
			"<think>": {tc.base + 24, TokenUserDefined}, "</think>": {tc.base + 25, TokenUserDefined},
		} {
			if id := v.ID(tok); id != want.id || v.Types[id] != want.typ {
				t.Errorf("n=%d: %s at %d type %d, want %d type %d", tc.n, tok, id, v.Types[max(id, 0)], want.id, want.typ)
			}
		}
		if int(v.EOS) != tc.base+2 || int(v.BOS) != tc.base || int(v.PAD) != tc.base {
			t.Errorf("n=%d: bos %d eos %d pad %d", tc.n, v.BOS, v.EOS, v.PAD)
		}
	}
	if _, err := newQwenVocab(200); err == nil {
		t.Error("vocabulary too small for the bytes accepted")
	}
}
