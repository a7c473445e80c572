package synth

import (
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// TestTypeChoice checks llama-quantize's choice for named tensors against
// a table worked out by hand from src/llama-quant.cpp
// (llama_tensor_get_type_impl, tensor_type_fallback).
func TestTypeChoice(t *testing.T) {
	k3 := k3Config()
	tiny := tinyConfig()
	tests := []struct {
		cfg    Config
		out    OutType
		tensor string
		want   quant.Type
	}{
		// K3 Q2_K, as REFERENCE.md describes a real file
		{k3, TypeQ2_K, "token_embd.weight", quant.Q2_K},
		{k3, TypeQ2_K, "output.weight", quant.Q6_K},
		{k3, TypeQ2_K, "blk.5.ffn_gate_exps.weight", quant.Q2_K},
		{k3, TypeQ2_K, "blk.5.ffn_up_exps.weight", quant.Q2_K},
		{k3, TypeQ2_K, "blk.5.ffn_down_exps.weight", quant.Q3_K},
		{k3, TypeQ2_K, "blk.5.ffn_down_shexp.weight", quant.Q3_K},
		{k3, TypeQ2_K, "blk.0.ffn_down.weight", quant.Q3_K},
		// layer 0 is KDA: n_gqa() = 0 < 4 picks Q3_K for attn_v
		{k3, TypeQ2_K, "blk.0.attn_v.weight", quant.Q3_K},
		{k3, TypeQ2_K, "blk.0.attn_k.weight", quant.Q2_K},
		{k3, TypeQ2_K, "blk.0.attn_output.weight", quant.Q3_K},
		{k3, TypeQ2_K, "blk.3.attn_output.weight", quant.Q3_K},
		// rows of 128 do not take a 256-block: Q2_K falls back to Q4_0
		{k3, TypeQ2_K, "blk.0.ssm_f_b.weight", quant.Q4_0},
		{k3, TypeQ2_K, "blk.3.attn_k_b.weight", quant.Q4_0},
		{k3, TypeQ2_K, "blk.3.attn_v_b.weight", quant.Q2_K},
		{k3, TypeQ2_K, "blk.3.attn_q_b.weight", quant.Q2_K},
		// never quantized: kept as the f16 conversion stored them
		{k3, TypeQ2_K, "blk.5.ffn_gate_inp.weight", quant.F32},
		{k3, TypeQ2_K, "blk.0.ssm_conv1d_q.weight", quant.F32},
		{k3, TypeQ2_K, "blk.0.ssm_a", quant.F32},
		{k3, TypeQ2_K, "blk.0.ssm_dt.bias", quant.F32},
		{k3, TypeQ2_K, "blk.5.exp_probs_b.bias", quant.F32},
		{k3, TypeQ2_K, "blk.3.attn_kv_a_norm.weight", quant.F32},
		{k3, TypeQ2_K, "output_res_score.weight", quant.F32},
		// Q4_K_M: use_more_bits over 93 layers (n/8 = 11)
		{k3, TypeQ4_K_M, "output.weight", quant.Q6_K},
		{k3, TypeQ4_K_M, "token_embd.weight", quant.Q4_K},
		{k3, TypeQ4_K_M, "blk.0.ffn_down.weight", quant.Q6_K},
		{k3, TypeQ4_K_M, "blk.12.ffn_down_exps.weight", quant.Q4_K},
		{k3, TypeQ4_K_M, "blk.13.ffn_down_exps.weight", quant.Q6_K},
		{k3, TypeQ4_K_M, "blk.90.ffn_down_exps.weight", quant.Q6_K},
		{k3, TypeQ4_K_M, "blk.5.ffn_up_exps.weight", quant.Q4_K},
		{k3, TypeQ4_K_M, "blk.0.attn_output.weight", quant.Q4_K},
		// attn_v counts KDA layers only (69 of them, n/8 = 8): the 1st is
		// i=0 (more bits), blk.12 is the 10th (i=9: (9-8)%3=1, no),
		// blk.13 the 11th (i=10: (10-8)%3=2, more bits)
		{k3, TypeQ4_K_M, "blk.0.attn_v.weight", quant.Q6_K},
		{k3, TypeQ4_K_M, "blk.12.attn_v.weight", quant.Q4_K},
		{k3, TypeQ4_K_M, "blk.13.attn_v.weight", quant.Q6_K},
		// 128-wide rows: Q4_K falls back to Q5_0
		{k3, TypeQ4_K_M, "blk.0.ssm_f_b.weight", quant.Q5_0},
		// Q8_0 everywhere it can be
		{k3, TypeQ8_0, "output.weight", quant.Q8_0},
		{k3, TypeQ8_0, "blk.5.ffn_down_exps.weight", quant.Q8_0},
		{k3, TypeQ8_0, "blk.0.ssm_f_b.weight", quant.Q8_0},
		{k3, TypeQ8_0, "blk.0.attn_norm.weight", quant.F32},
		// convert_hf_to_gguf.py outputs
		{k3, TypeF16, "blk.5.ffn_gate_exps.weight", quant.F16},
		{k3, TypeF16, "blk.5.ffn_gate_inp.weight", quant.F32},
		{k3, TypeF16, "blk.0.ssm_conv1d_k.weight", quant.F32},
		{k3, TypeF32, "token_embd.weight", quant.F32},
		// eight experts: llama-quantize's Mixtral rules
		{tiny, TypeQ2_K, "blk.0.attn_v.weight", quant.Q8_0},
		{tiny, TypeQ2_K, "blk.0.attn_k.weight", quant.Q8_0},
		// ... Q5_K for attn_output, whose 128-wide rows fall back to Q5_1
		{tiny, TypeQ2_K, "blk.0.attn_output.weight", quant.Q5_1},
		{tiny, TypeQ4_K_M, "blk.1.attn_output.weight", quant.Q5_1},
		{tiny, TypeQ2_K, "blk.1.ffn_gate_exps.weight", quant.Q4_0}, // latent 128
		{tiny, TypeQ2_K, "blk.1.ffn_down_exps.weight", quant.Q3_K},
	}
	plans := map[[2]int]map[string]quant.Type{}
	for _, tt := range tests {
		t.Run(tt.out.String()+"/"+tt.cfg.Name+"/"+tt.tensor, func(t *testing.T) {
			key := [2]int{tt.cfg.NLayer, int(tt.out)}
			if plans[key] == nil {
				cfg := tt.cfg
				cfg.Type = tt.out
				defs, err := tensorDefs(&cfg)
				if err != nil {
					t.Fatal(err)
				}
				plans[key] = map[string]quant.Type{}
				for _, d := range defs {
					plans[key][d.Name] = d.Type
				}
			}
			got, ok := plans[key][tt.tensor]
			if !ok {
				t.Fatalf("no tensor %q", tt.tensor)
			}
			if got != tt.want {
				t.Errorf("%s: got %s, want %s", tt.tensor, got, tt.want)
			}
		})
	}
}

func TestFallback(t *testing.T) {
	tests := []struct {
		typ  quant.Type
		cols int64
		want quant.Type
	}{
		{quant.Q2_K, 512, quant.Q2_K},
		{quant.Q2_K, 96, quant.Q4_0},
		{quant.Q3_K, 64, quant.Q4_0},
		{quant.Q4_K, 128, quant.Q5_0},
		{quant.Q5_K, 32, quant.Q5_1},
		{quant.Q6_K, 160, quant.Q8_0},
		{quant.Q6_K, 100, quant.F16},
		{quant.Q8_0, 48, quant.F16},
		{quant.IQ2_XXS, 128, quant.IQ4_NL},
		{quant.IQ1_S, 256, quant.IQ1_S},
		{quant.IQ3_S, 48, quant.F16},
	}
	for _, tt := range tests {
		if got := fallback(tt.typ, tt.cols); got != tt.want {
			t.Errorf("fallback(%s, %d) = %s, want %s", tt.typ, tt.cols, got, tt.want)
		}
	}
}

// TestTensorOrder checks the loader's order: global tensors, then layers
// by number (blk.10 after blk.9), names sorted within a layer.
func TestTensorOrder(t *testing.T) {
	cfg := tinyConfig()
	cfg.NLayer = 12
	defs, err := tensorDefs(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	prevLayer, prevName := -1, ""
	for _, d := range defs {
		l := layerOf(d.Name)
		if l < prevLayer || (l == prevLayer && d.Name < prevName) {
			t.Fatalf("%s after %s", d.Name, prevName)
		}
		prevLayer, prevName = l, d.Name
	}
}

// TestMixTypes checks the *-moe mixes on the tiny preset with 256-wide
// routed experts: IQ experts (down one step up), Q4_K elsewhere, Q6_K
// output, and llama-quantize's fallbacks for 128-wide rows.
func TestMixTypes(t *testing.T) {
	cfg := tinyConfig()
	cfg.NLatent = 256
	cfg.Type = TypeIQ2_XXS_MoE
	defs, err := tensorDefs(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]quant.Type{}
	for _, d := range defs {
		got[d.Name] = d.Type
	}
	for name, want := range map[string]quant.Type{
		"output.weight":                quant.Q6_K,
		"token_embd.weight":            quant.Q4_K,
		"blk.1.ffn_gate_exps.weight":   quant.IQ2_XXS,
		"blk.1.ffn_up_exps.weight":     quant.IQ2_XXS,
		"blk.1.ffn_down_exps.weight":   quant.IQ2_XS,
		"blk.1.ffn_gate_shexp.weight":  quant.Q4_K,
		"blk.1.ffn_down_shexp.weight":  quant.Q4_K,
		"blk.0.ffn_down.weight":        quant.Q4_K,
		"blk.1.ffn_routed_down.weight": quant.Q4_K,
		"blk.1.attn_q_b.weight":        quant.Q5_0, // 64-wide rows
		"blk.0.attn_output.weight":     quant.Q5_0, // 128-wide rows
		"blk.1.ffn_gate_inp.weight":    quant.F32,
		"blk.1.ffn_norm.weight":        quant.F32,
	} {
		if got[name] != want {
			t.Errorf("%s: %s, want %s", name, got[name], want)
		}
	}
	cfg.NLatent = 128 // gate/up rows of 128: IQ falls back to IQ4_NL
	cfg.Type = TypeIQ1_M_MoE
	defs, err = tensorDefs(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		switch d.Name {
		case "blk.1.ffn_gate_exps.weight":
			if d.Type != quant.IQ4_NL {
				t.Errorf("%s: %s, want iq4_nl", d.Name, d.Type)
			}
		case "blk.1.ffn_down_exps.weight":
			if d.Type != quant.IQ2_XXS {
				t.Errorf("%s: %s, want iq2_xxs", d.Name, d.Type)
			}
		}
	}
	for _, name := range []string{"iq1_s-moe", "IQ1_M-MoE", "iq2_xxs-moe", "iq3_xxs-moe"} {
		if ot, err := ParseOutType(name); err != nil || !ot.expertMix() || !ot.quantized() {
			t.Errorf("ParseOutType(%q) = %v, %v", name, ot, err)
		}
	}
}

// TestMixImatrix: a tensor whose type needs an importance matrix is
// quantized with each column's mean square over its rows, for directly
// made and pool-built tensors alike.
func TestMixImatrix(t *testing.T) {
	for _, rows := range []int64{64, 8192} { // 64 direct rows; 2M elements: pool-built
		def := tensorDef{Name: "blk.1.ffn_up_exps.weight", Shape: []int64{256, rows}, Type: quant.IQ2_XXS, Init: std(0.1)}
		m, err := newRowMaker(&def, 7)
		if err != nil {
			t.Fatal(err)
		}
		if (m.pool != nil) != (rows > 64) {
			t.Fatalf("rows %d: pool %v", rows, m.pool != nil)
		}
		stream, n := int64(0), rows
		if m.pool != nil {
			stream, n = 1, int64(m.poolRows())
		}
		want := make([]float64, 256)
		src := make([]float32, 256)
		for i := range n {
			r := rowRNG(7, hashName(def.Name), stream, i)
			def.Init.fill(&r, src)
			for c, v := range src {
				want[c] += float64(v*v) / float64(n)
			}
		}
		for c := range want {
			if d := float64(m.imatrix[c]) - want[c]; d > 1e-6*want[c] || d < -1e-6*want[c] {
				t.Fatalf("rows %d: column %d importance %g, want %g", rows, c, m.imatrix[c], want[c])
			}
		}
		if m.pool != nil {
			continue
		}
		out := make([]byte, m.rowBytes)
		if err := m.rows(3, 1, out, src); err != nil {
			t.Fatal(err)
		}
		r := rowRNG(7, hashName(def.Name), 0, 3)
		def.Init.fill(&r, src)
		ref := make([]byte, m.rowBytes)
		if err := quant.QuantizeImatrix(quant.IQ2_XXS, src, ref, 256, m.imatrix); err != nil {
			t.Fatal(err)
		}
		if string(out) != string(ref) {
			t.Error("row 3 is not QuantizeImatrix with the column importance")
		}
	}
}
