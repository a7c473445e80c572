package synth

import (
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// TestDeepSeek2Presets plans the real-shape presets: every tensor
// llama.cpp's deepseek2 loader reads, with llama-quantize's Q2_K types.
func TestDeepSeek2Presets(t *testing.T) {
	for _, tc := range []struct {
		preset          string
		tensors, dense  int
		experts, layers int
	}{
		{"kimi-k2", 3 + 61*10 + 60*8 + 1*3, 1, 384, 61},
		{"deepseek-v3", 3 + 61*10 + 58*8 + 3*3, 3, 256, 61},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			c, err := ArchPreset(ArchDeepSeek2, tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			specs, err := Plan(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(specs) != tc.tensors {
				t.Errorf("%d tensors, want %d", len(specs), tc.tensors)
			}
			types := map[string]quant.Type{}
			for _, s := range specs {
				types[s.Name] = s.Type
			}
			for name, want := range map[string]quant.Type{
				"output.weight":               quant.Q6_K,
				"blk.5.ffn_gate_exps.weight":  quant.Q2_K,
				"blk.5.ffn_up_exps.weight":    quant.Q2_K,
				"blk.5.ffn_down_exps.weight":  quant.Q3_K,
				"blk.5.ffn_gate_inp.weight":   quant.F32,
				"blk.5.exp_probs_b.bias":      quant.F32,
				"blk.5.attn_k_b.weight":       quant.Q4_0, // 128-wide rows: Q2_K falls back
				"blk.5.attn_v_b.weight":       quant.Q2_K,
				"blk.5.attn_output.weight":    quant.Q3_K,
				"blk.5.attn_kv_a_norm.weight": quant.F32,
			} {
				if got, ok := types[name]; !ok || got != want {
					t.Errorf("%s: %v (present %v), want %v", name, got, ok, want)
				}
			}
		})
	}
	c, _ := ArchPreset(ArchDeepSeek2, "tiny")
	c.KVB, c.Type = true, TypeQ4_K_M
	specs, err := Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		// attn_kv_b is attn_v-like: Q4_K_M gives the last eighth of the
		// layers Q6_K (Q8_0 for these 64-wide rows), the others Q4_K (Q5_0)
		want := map[string]quant.Type{"blk.0.attn_kv_b.weight": quant.Q5_0, "blk.3.attn_kv_b.weight": quant.Q8_0}
		if w, ok := want[s.Name]; ok && s.Type != w {
			t.Errorf("%s: %v, want %v", s.Name, s.Type, w)
		}
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.QLoRA = 0 }, // not a lite layer count
		func(c *Config) { c.ExpertGroups, c.ExpertGroupsUsed = 3, 1 },
		func(c *Config) { c.Tokenizer = "gpt2" },
		func(c *Config) { c.QKRope = 15 },
	} {
		c, _ := ArchPreset(ArchDeepSeek2, "tiny")
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c.DeepSeek2)
		}
	}
}
