package synth

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/core/tokenizer"
	"github.com/k3-inference/k3/tools/parity"
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

// TestDeepSeek2LlamaLoadsAndTokenizes writes the real-shape presets at
// small sizes (Q2_K, split by size), has llama.cpp load and run them, and
// tokenizes text with control tokens as k3 and llama.cpp do: the
// pre-tokenizer names (deepseek-v3, kimi-k2) and the special tokens the
// chat templates use are ones llama.cpp knows.
func TestDeepSeek2LlamaLoadsAndTokenizes(t *testing.T) {
	r := parity.Require(t)
	texts := map[string][]string{
		"kimi-k2": {"<|im_user|>user<|im_middle|>Hello, 世界 123456!<|im_end|><|im_assistant|>assistant<|im_middle|>",
			"<|tool_calls_section_begin|><|tool_call_begin|>functions.get:0<|tool_call_argument_begin|>{\"a\": 1}<|tool_call_end|>"},
		"deepseek-v3": {"<｜User｜>Hello, 世界 123456!<｜Assistant｜><think>\n\n</think>ok<｜end▁of▁sentence｜>",
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
	}
	for _, preset := range []string{"kimi-k2", "deepseek-v3"} {
		t.Run(preset, func(t *testing.T) {
			c, err := ArchPreset(ArchDeepSeek2, preset)
			if err != nil {
				t.Fatal(err)
			}
			c.NLayer, c.NEmbd, c.NHead, c.NVocab, c.NFF, c.NExpert, c.NFFExp = 4, 256, 2, 1024, 256, 16, 256
			c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead, c.NDense = 64, 64, 32, 16, 32, 1
			if c.ExpertGroups > 0 {
				c.ExpertGroups, c.ExpertGroupsUsed = 8, 4
			}
			res, err := Write(filepath.Join(t.TempDir(), "m.gguf"), c, WriteOptions{Split: gguf.SplitOptions{MaxBytes: 2_000_000}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Paths) < 2 {
				t.Fatalf("%d shards, want a split file", len(res.Paths))
			}
			path := res.Paths[0]
			if _, err := r.Greedy(path, []int32{5, 300, 17}, 4, 2); err != nil {
				t.Fatalf("llama.cpp: %v", err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tk, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, text := range texts[preset] {
				for _, special := range []bool{false, true} {
					want, err := r.Tokenize(path, []byte(text), true, special)
					if err != nil {
						t.Fatal(err)
					}
					got, err := tk.Tokenize(text, true, special)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(want, got) {
						t.Errorf("%q special=%v:\nllama.cpp %v\nk3        %v", text, special, want, got)
					}
					if !special {
						continue
					}
					// every control token written in the text is one token
					sp := deepseek2Specials(c.Tokenizer)
					for _, ct := range sp.tokens {
						id, ok := tk.Lookup(ct)
						if !ok {
							t.Fatalf("%s not in the vocabulary", ct)
						}
						n := strings.Count(text, ct)
						if ct == sp.bos && sp.addBOS {
							n++ // add_special puts DeepSeek's BOS in front
						}
						if m := countOf(got, id); n != m {
							t.Errorf("%q: %s (id %d) %d times in the text, %d in the tokens", text, ct, id, n, m)
						}
					}
				}
			}
		})
	}
}

func countOf(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}
