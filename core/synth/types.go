package synth

import (
	"fmt"
	"strings"

	"github.com/k3-inference/k3/core/quant"
)

// OutType is the file type of a synthetic checkpoint: what
// convert_hf_to_gguf.py writes (f32, f16), what llama-quantize makes of
// the f16 conversion (q8_0, q4_k_m, q2_k), or a "dynamic" expert mix
// (the *-moe types) as the common low-bit recipes for huge MoE models
// make with llama-quantize --tensor-type:
//
//	iq1_s-moe    routed gate/up IQ1_S,   routed down IQ1_M
//	iq1_m-moe    routed gate/up IQ1_M,   routed down IQ2_XXS
//	iq2_xxs-moe  routed gate/up IQ2_XXS, routed down IQ2_XS
//	iq3_xxs-moe  routed gate/up IQ3_XXS, routed down IQ3_S
//
// and in all of them output.weight (or a tied token_embd) Q6_K, every
// other quantizable tensor (token_embd, attention, shared experts, dense
// FFN, latent projections) Q4_K. A row length that does not take a
// 256-block falls back as llama-quantize's tensor_type_fallback does
// (IQ types to IQ4_NL, Q4_K to Q5_0, Q6_K to Q8_0). Types that ggml will
// not quantize without an importance matrix (IQ1_S, IQ2_XXS, IQ2_XS) are
// quantized with a deterministic one: per column, the mean square of the
// tensor's F32 source values in that column over all its rows (the pool
// rows for pool-built tensors), which is what an imatrix from activations
// approximates. The other types are quantized without one.
type OutType int

const (
	TypeF32 OutType = iota
	TypeF16
	TypeQ8_0
	TypeQ4_K_M
	TypeQ2_K
	TypeIQ1_S_MoE
	TypeIQ1_M_MoE
	TypeIQ2_XXS_MoE
	TypeIQ3_XXS_MoE
)

var outTypes = []struct {
	name  string
	ftype uint32     // general.file_type (llama_ftype)
	def   quant.Type // llama_ftype_get_default_type; for a mix, the non-expert type
	// a mix's routed expert types: gate and up, and down
	exps, down quant.Type
}{
	TypeF32:         {"f32", 0, quant.F32, 0, 0},
	TypeF16:         {"f16", 1, quant.F16, 0, 0},
	TypeQ8_0:        {"q8_0", 7, quant.Q8_0, 0, 0},
	TypeQ4_K_M:      {"q4_k_m", 15, quant.Q4_K, 0, 0},
	TypeQ2_K:        {"q2_k", 10, quant.Q2_K, 0, 0},
	TypeIQ1_S_MoE:   {"iq1_s-moe", 24, quant.Q4_K, quant.IQ1_S, quant.IQ1_M},
	TypeIQ1_M_MoE:   {"iq1_m-moe", 31, quant.Q4_K, quant.IQ1_M, quant.IQ2_XXS},
	TypeIQ2_XXS_MoE: {"iq2_xxs-moe", 19, quant.Q4_K, quant.IQ2_XXS, quant.IQ2_XS},
	TypeIQ3_XXS_MoE: {"iq3_xxs-moe", 23, quant.Q4_K, quant.IQ3_XXS, quant.IQ3_S},
}

// MixHelp describes the *-moe mixes in one line, for flag help.
func MixHelp() string {
	var parts []string
	for i, t := range outTypes {
		if OutType(i).expertMix() {
			parts = append(parts, fmt.Sprintf("%s = routed gate/up %s, down %s", t.name, t.exps, t.down))
		}
	}
	return strings.Join(parts, "; ") + "; in each mix output Q6_K and every other quantized tensor Q4_K " +
		"(rows not of 256-blocks fall back as llama-quantize does: IQ to IQ4_NL, Q4_K to Q5_0, Q6_K to Q8_0); " +
		"IQ1_S, IQ2_XXS and IQ2_XS are quantized with a synthetic importance matrix, each column's mean square over the tensor's F32 rows"
}

// expertMix reports whether t is one of the *-moe mixes.
func (t OutType) expertMix() bool { return outTypes[t].exps != 0 }

// OutTypes lists the output type names ParseOutType accepts.
func OutTypes() []string {
	names := make([]string, len(outTypes))
	for i, t := range outTypes {
		names[i] = t.name
	}
	return names
}

// ParseOutType maps a name of OutTypes (any case) to an OutType.
func ParseOutType(s string) (OutType, error) {
	for i, t := range outTypes {
		if strings.EqualFold(s, t.name) {
			return OutType(i), nil
		}
	}
	return 0, fmt.Errorf("synth: unknown output type %q (have %s)", s, strings.Join(OutTypes(), ", "))
}

func (t OutType) valid() bool      { return t >= 0 && int(t) < len(outTypes) }
func (t OutType) String() string   { return outTypes[t].name }
func (t OutType) FileType() uint32 { return outTypes[t].ftype }

// quantized reports whether the file is llama-quantize output rather than
// convert_hf_to_gguf.py output.
func (t OutType) quantized() bool { return t >= TypeQ8_0 }

// sourceType is the type convert_hf_to_gguf.py gives a tensor when it
// converts at ftype: 1-D tensors, norms, the router, the KDA convolutions
// and anything not named *.weight stay F32.
func sourceType(name string, nDims int, ftype quant.Type) quant.Type {
	switch {
	case nDims <= 1, strings.HasSuffix(name, "_norm.weight"), !strings.HasSuffix(name, ".weight"),
		strings.Contains(name, "ffn_gate_inp."), strings.Contains(name, "ssm_conv1d"):
		return quant.F32
	}
	return ftype
}

// allowsQuantization mirrors llama-quantize's tensor_allows_quantization
// for the names a kimi-k3 file has.
func allowsQuantization(name string, nDims int) bool {
	return nDims >= 2 && strings.HasSuffix(name, "weight") &&
		!strings.Contains(name, "_norm.weight") &&
		!strings.Contains(name, "ffn_gate_inp.weight") &&
		!strings.Contains(name, "ssm_conv1d")
}

type category int

const (
	catOther category = iota
	catOutput
	catTokenEmbd
	catAttnV
	catAttnK
	catAttnQ
	catAttnOutput
	catFFNUp
	catFFNGate
	catFFNDown
)

// categoryOf is llama-quantize's tensor_get_category, restricted to what
// kimi-k3 has (no attn_qkv / attn_kv_b: the MLA split is kept).
func categoryOf(name string) category {
	switch {
	case name == "output.weight":
		return catOutput
	case name == "token_embd.weight":
		return catTokenEmbd
	case strings.Contains(name, "attn_v.weight"), strings.Contains(name, "attn_kv_b.weight"):
		return catAttnV // category_is_attn_v: ATTENTION_V and ATTENTION_KV_B
	case strings.Contains(name, "attn_k.weight"):
		return catAttnK
	case strings.Contains(name, "attn_q.weight"):
		return catAttnQ
	case strings.Contains(name, "attn_output.weight"):
		return catAttnOutput
	case strings.Contains(name, "ffn_up"):
		return catFFNUp
	case strings.Contains(name, "ffn_gate"):
		return catFFNGate
	case strings.Contains(name, "ffn_down"):
		return catFFNDown
	}
	return catOther
}

// typeChooser replays llama-quantize's per-tensor choice. It is stateful
// like quantize_state_impl: attn_v and ffn_down counters advance in the
// order tensors are visited, which must be the loader's name order
// (see sortTensors).
type typeChooser struct {
	cfg       *Config
	out       OutType
	nAttnV    int
	iAttnV    int
	iFFNDown  int
	hasOutput bool
}

func newTypeChooser(cfg *Config, names []string) *typeChooser {
	tc := &typeChooser{cfg: cfg, out: cfg.Type}
	for _, n := range names {
		switch categoryOf(n) {
		case catAttnV:
			tc.nAttnV++
		case catOutput:
			tc.hasOutput = true
		}
	}
	return tc
}

// nGQA is hparams.n_gqa() with its default il = 0: n_head / n_head_kv of
// layer 0, or 0 when layer 0 is KDA (n_head_kv 0).
func (tc *typeChooser) nGQA() int {
	switch {
	case tc.cfg.Arch == ArchQwen3MoE:
		return tc.cfg.NHead / tc.cfg.NHeadKV
	case tc.cfg.Arch == ArchDeepSeek2 && !tc.cfg.KVB:
		return tc.cfg.NHead // absorbed MLA: head_count_kv 1
	case tc.cfg.Arch == ArchDeepSeek2:
		return 1
	}
	if tc.cfg.IsMLA(0) {
		return tc.cfg.NHead
	}
	return 0
}

func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// choose returns the type of tensor name with ggml shape ne. Call it once
// per tensor, in file order.
func (tc *typeChooser) choose(name string, ne []int64) quant.Type {
	nDims := ggmlNDims(ne)
	if !tc.out.quantized() {
		return sourceType(name, nDims, outTypes[tc.out].def)
	}
	if !allowsQuantization(name, nDims) {
		return sourceType(name, nDims, quant.F16)
	}
	t := tc.chooseImpl(name, ne)
	return fallback(t, ne[0])
}

func (tc *typeChooser) chooseImpl(name string, ne []int64) quant.Type {
	ft := tc.out
	t := outTypes[ft].def
	cat := categoryOf(name)
	if ft.expertMix() {
		return tc.chooseMix(name, ne, cat)
	}
	n8 := tc.cfg.NExpert == 8
	if cat == catOutput || (cat == catTokenEmbd && !tc.hasOutput) {
		// an untied token_embd is left alone by every ftype written here
		if ne[0]%int64(t.BlockSize()) != 0 {
			return quant.Q8_0
		}
		if t != quant.Q8_0 {
			return quant.Q6_K
		}
		return t
	}
	switch cat {
	case catAttnV:
		switch {
		case ft == TypeQ2_K && tc.nGQA() >= 4:
			t = quant.Q4_K
		case ft == TypeQ2_K:
			t = quant.Q3_K
		case ft == TypeQ4_K_M && useMoreBits(tc.iAttnV, tc.nAttnV):
			t = quant.Q6_K
		}
		if n8 {
			t = quant.Q8_0
		}
		tc.iAttnV++
	case catAttnK:
		if n8 {
			t = quant.Q8_0
		}
	case catFFNDown:
		il := tc.iFFNDown
		if tc.cfg.NExpert > 1 {
			il = layerOf(name)
		}
		switch {
		case ft == TypeQ2_K:
			t = quant.Q3_K
		case ft == TypeQ4_K_M && useMoreBits(il, tc.cfg.NLayer):
			t = quant.Q6_K
		}
		tc.iFFNDown++
	case catAttnOutput:
		switch {
		case n8 && (ft == TypeQ2_K || ft == TypeQ4_K_M):
			t = quant.Q5_K
		case !n8 && ft == TypeQ2_K:
			t = quant.Q3_K
		}
	}
	return t
}

// chooseMix is the type of a tensor in a *-moe mix (see OutType).
func (tc *typeChooser) chooseMix(name string, ne []int64, cat category) quant.Type {
	m := outTypes[tc.out]
	switch {
	case cat == catOutput || (cat == catTokenEmbd && !tc.hasOutput):
		return quant.Q6_K
	case strings.Contains(name, "ffn_down_exps."):
		return m.down
	case strings.Contains(name, "ffn_gate_exps."), strings.Contains(name, "ffn_up_exps."):
		return m.exps
	}
	return m.def
}

// fallback is llama-quantize's tensor_type_fallback: a type whose block
// does not divide the row length is swapped for a 32-block type, and for
// F16 when even that does not fit.
func fallback(t quant.Type, ncols int64) quant.Type {
	if ncols%int64(t.BlockSize()) == 0 {
		return t
	}
	r := t
	switch t {
	case quant.IQ1_S, quant.IQ1_M, quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S, quant.IQ4_XS:
		r = quant.IQ4_NL
	case quant.Q2_K, quant.Q3_K:
		r = quant.Q4_0
	case quant.Q4_K:
		r = quant.Q5_0
	case quant.Q5_K:
		r = quant.Q5_1
	case quant.Q6_K:
		r = quant.Q8_0
	}
	if ncols%int64(r.BlockSize()) != 0 {
		return quant.F16
	}
	return r
}

// ggmlNDims is ggml_n_dims: trailing 1s do not count, and a scalar has one.
func ggmlNDims(ne []int64) int {
	n := len(ne)
	for n > 1 && ne[n-1] == 1 {
		n--
	}
	return max(n, 1)
}

// layerOf parses the N of "blk.N.", or returns -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	n, digits := 0, 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
		digits++
	}
	if digits == 0 {
		return -1
	}
	return n
}
