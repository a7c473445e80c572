package synth

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/k3-inference/k3/core/quant"
)

// tensorDef is one tensor of the file: its name, ggml shape (ne[0] is the
// row length), type, and the distribution its values are drawn from.
type tensorDef struct {
	Name  string
	Shape []int64
	Type  quant.Type
	Init  initDist
	// Rows, when set, reshapes a row's drawn F32 values in place and
	// reports whether it did (realistic routing, routing.go); a shaped row
	// is always quantized from its values, never assembled from the pool.
	Rows func(row int64, src []float32) bool
}

// initDist draws each value uniformly from [Lo, Hi]; with NegExp the value
// stored is -exp(draw), the folded form of A_log.
type initDist struct {
	Lo, Hi float32
	NegExp bool
}

// std is a zero-mean uniform distribution with standard deviation s.
func std(s float64) initDist {
	a := float32(s * math.Sqrt(3))
	return initDist{Lo: -a, Hi: a}
}

// fanIn scales a projection so an O(1) input gives an O(1) output.
func fanIn(n int) initDist { return std(1 / math.Sqrt(float64(n))) }

// branchOut scales the last projection of an attention or FFN branch by
// 1/sqrt(n_layer) more than fanIn: each layer then nudges the residual
// stream instead of replacing it, so a small difference (rounding, a
// flipped expert choice) in one layer does not grow layer after layer into
// different logits. Measured on the tiny preset, llama.cpp's native and
// scalar CPU code then differ by 0.07 in the q8_0 logits instead of 1.3.
func branchOut(cfg *Config, n int) initDist {
	return std(1 / math.Sqrt(float64(n)*float64(cfg.NLayer)))
}

// norm is an RMSNorm weight: near 1, not exactly, so a wrong norm shows.
var norm = initDist{Lo: 0.9, Hi: 1.1}

func (t *tensorDef) rowLen() int64 { return t.Shape[0] }

func (t *tensorDef) rows() int64 {
	r := int64(1)
	for _, d := range t.Shape[1:] {
		r *= d
	}
	return r
}

func (t *tensorDef) elements() int64 { return t.rowLen() * t.rows() }

// tensorDefs lists every tensor of a file for cfg, in the order llama.cpp's
// loader (and so llama-quantize) visits them, with types chosen.
func tensorDefs(cfg *Config) ([]tensorDef, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.validateRouting(); err != nil {
		return nil, err
	}
	if cfg.Arch == ArchQwen3MoE {
		return withRouting(cfg, chooseTypes(cfg, qwen3moeTensorDefs(cfg))), nil
	}
	var defs []tensorDef
	add := func(name string, init initDist, shape ...int64) {
		defs = append(defs, tensorDef{Name: name, Shape: shape, Init: init})
	}
	if cfg.Arch == ArchDeepSeek2 {
		deepseek2Defs(cfg, add)
		return withRouting(cfg, chooseTypes(cfg, defs)), nil
	}
	E, V := int64(cfg.NEmbd), int64(cfg.NVocab)
	add("token_embd.weight", std(1), E, V)
	add("output_norm.weight", norm, E)
	add("output.weight", fanIn(cfg.NEmbd), E, V)
	if cfg.AttnResBlock > 0 {
		add("output_res_score.weight", fanIn(cfg.NEmbd), E)
	}
	for il := range cfg.NLayer {
		blk := func(s string) string { return fmt.Sprintf("blk.%d.%s", il, s) }
		layerAdd := func(s string, init initDist, shape ...int64) { add(blk(s), init, shape...) }
		layerAdd("attn_norm.weight", norm, E)
		layerAdd("ffn_norm.weight", norm, E)
		if cfg.AttnResBlock > 0 {
			layerAdd("attn_res_score.weight", fanIn(cfg.NEmbd), E)
			layerAdd("ffn_res_score.weight", fanIn(cfg.NEmbd), E)
		}
		if cfg.IsMLA(il) {
			mlaDefs(cfg, layerAdd)
		} else {
			kdaDefs(cfg, layerAdd)
		}
		if cfg.IsDense(il) {
			layerAdd("ffn_gate.weight", fanIn(cfg.NEmbd), E, int64(cfg.NFF))
			layerAdd("ffn_up.weight", fanIn(cfg.NEmbd), E, int64(cfg.NFF))
			layerAdd("ffn_down.weight", branchOut(cfg, cfg.NFF), int64(cfg.NFF), E)
		} else {
			moeDefs(cfg, layerAdd)
		}
	}
	return withRouting(cfg, chooseTypes(cfg, defs)), nil
}

// chooseTypes sorts defs into file order and gives each its type.
func chooseTypes(cfg *Config, defs []tensorDef) []tensorDef {
	sortTensors(defs)
	names := make([]string, len(defs))
	for i := range defs {
		names[i] = defs[i].Name
	}
	tc := newTypeChooser(cfg, names)
	for i := range defs {
		defs[i].Type = tc.choose(defs[i].Name, defs[i].Shape)
	}
	return defs
}

type adder func(name string, init initDist, shape ...int64)

func kdaDefs(cfg *Config, add adder) {
	E, H, h := int64(cfg.NEmbd), int64(cfg.NHead), int64(cfg.KDAHead)
	d := H * h
	for _, qkv := range []string{"q", "k", "v"} {
		// the converter writes [d_conv, 1, d_inner, 1]; ggml_n_dims drops
		// the trailing 1 when llama-quantize rewrites it
		shape := []int64{int64(cfg.ConvK), 1, d, 1}
		if cfg.Type.quantized() {
			shape = shape[:3]
		}
		add("ssm_conv1d_"+qkv+".weight", fanIn(cfg.ConvK), shape...)
		add("attn_"+qkv+".weight", fanIn(cfg.NEmbd), E, d)
	}
	add("ssm_f_a.weight", fanIn(cfg.NEmbd), E, h)
	add("ssm_f_b.weight", std(0.5/math.Sqrt(float64(h))), h, d)
	add("ssm_beta.weight", fanIn(cfg.NEmbd), E, H)
	if cfg.GateLowerBound != 0 {
		// g = lb * sigmoid(exp(A_log) * (f + dt_bias)): exp(A_log) in
		// [0.5, 2] and dt_bias in [-4, -1] keep the per-step decay in
		// roughly [-2, 0) without saturating the sigmoid.
		add("ssm_a", initDist{Lo: float32(math.Log(0.5)), Hi: float32(math.Log(2)), NegExp: true}, H)
		add("ssm_dt.bias", initDist{Lo: -4, Hi: -1}, d)
	} else {
		// g = -exp(A_log) * softplus(f + dt_bias), Mamba's ranges:
		// A in [1, 16], softplus(dt_bias) in [0.001, 0.1].
		add("ssm_a", initDist{Lo: 0, Hi: float32(math.Log(16)), NegExp: true}, H)
		add("ssm_dt.bias", initDist{Lo: -6.9, Hi: -2.25}, d)
	}
	add("ssm_g.weight", fanIn(cfg.NEmbd), E, d)
	add("ssm_norm.weight", norm, h)
	add("attn_output.weight", branchOut(cfg, int(d)), d, E)
}

func mlaDefs(cfg *Config, add adder) {
	E, H := int64(cfg.NEmbd), int64(cfg.NHead)
	nK := int64(cfg.QKNope + cfg.QKRope)
	if cfg.QLoRA > 0 {
		add("attn_q_a_norm.weight", norm, int64(cfg.QLoRA))
		add("attn_q_a.weight", fanIn(cfg.NEmbd), E, int64(cfg.QLoRA))
		add("attn_q_b.weight", fanIn(cfg.QLoRA), int64(cfg.QLoRA), H*nK)
	} else {
		add("attn_q.weight", fanIn(cfg.NEmbd), E, H*nK)
	}
	add("attn_kv_a_mqa.weight", fanIn(cfg.NEmbd), E, int64(cfg.KVLoRA+cfg.QKRope))
	add("attn_kv_a_norm.weight", norm, int64(cfg.KVLoRA))
	add("attn_k_b.weight", fanIn(cfg.QKNope), int64(cfg.QKNope), int64(cfg.KVLoRA), H)
	add("attn_v_b.weight", fanIn(cfg.KVLoRA), int64(cfg.KVLoRA), int64(cfg.VHead), H)
	if cfg.MLAGate {
		add("attn_gate.weight", fanIn(cfg.NEmbd), E, H*int64(cfg.VHead))
	}
	add("attn_output.weight", branchOut(cfg, cfg.NHead*cfg.VHead), H*int64(cfg.VHead), E)
}

func moeDefs(cfg *Config, add adder) {
	E, X, F, L := int64(cfg.NEmbd), int64(cfg.NExpert), int64(cfg.NFFExp), int64(cfg.latent())
	// router logits ~ N(0, 1.5^2): sigmoid scores spread, so the chosen
	// experts differ from token to token
	add("ffn_gate_inp.weight", std(1.5/math.Sqrt(float64(E))), E, X)
	add("exp_probs_b.bias", initDist{Lo: -0.1, Hi: 0.1}, X)
	add("ffn_gate_exps.weight", fanIn(int(L)), L, F, X)
	add("ffn_up_exps.weight", fanIn(int(L)), L, F, X)
	down := branchOut(cfg, int(F))
	if cfg.NLatent > 0 {
		down = fanIn(int(F)) // ffn_routed_up scales the branch instead
	}
	add("ffn_down_exps.weight", down, F, L, X)
	if cfg.NLatent > 0 {
		add("ffn_routed_down.weight", fanIn(cfg.NEmbd), E, L)
		add("ffn_routed_up.weight", branchOut(cfg, int(L)), L, E)
		if cfg.RoutedNorm {
			add("ffn_routed_norm.weight", norm, L)
		}
	}
	if cfg.NExpertShared > 0 {
		S := F * int64(cfg.NExpertShared)
		add("ffn_gate_shexp.weight", fanIn(cfg.NEmbd), E, S)
		add("ffn_up_shexp.weight", fanIn(cfg.NEmbd), E, S)
		add("ffn_down_shexp.weight", branchOut(cfg, int(S)), S, E)
	}
}

// sortTensors orders tensors as llama_model_loader's weight_name_comparer:
// non-layer tensors first, then by layer number, then by name bytes.
func sortTensors(defs []tensorDef) {
	slices.SortStableFunc(defs, func(a, b tensorDef) int {
		la, lb := layerOf(a.Name), layerOf(b.Name)
		if la != lb {
			return la - lb
		}
		return strings.Compare(a.Name, b.Name)
	})
}
