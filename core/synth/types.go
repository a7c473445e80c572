package synth

import (
	"fmt"
	"strings"

	"github.com/k3-inference/k3/core/quant"
)

// OutType is the file type of a synthetic checkpoint: what
// convert_hf_to_gguf.py writes (f32, f16) or what llama-quantize makes of
// the f16 conversion (q8_0, q4_k_m, q2_k).
type OutType int

const (
	TypeF32 OutType = iota
	TypeF16
	TypeQ8_0
	TypeQ4_K_M
	TypeQ2_K
)

var outTypes = []struct {
	name  string
	ftype uint32     // general.file_type (llama_ftype)
	def   quant.Type // llama_ftype_get_default_type
}{
	TypeF32:    {"f32", 0, quant.F32},
	TypeF16:    {"f16", 1, quant.F16},
	TypeQ8_0:   {"q8_0", 7, quant.Q8_0},
	TypeQ4_K_M: {"q4_k_m", 15, quant.Q4_K},
	TypeQ2_K:   {"q2_k", 10, quant.Q2_K},
}

// OutTypes lists the output type names ParseOutType accepts.
func OutTypes() []string {
	names := make([]string, len(outTypes))
	for i, t := range outTypes {
		names[i] = t.name
	}
	return names
}

// ParseOutType maps "f32", "f16", "q8_0", "q4_k_m" or "q2_k" (any case) to an OutType.
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

// fallback is llama-quantize's tensor_type_fallback: a type whose block
// does not divide the row length is swapped for a 32-block type, and for
// F16 when even that does not fit.
func fallback(t quant.Type, ncols int64) quant.Type {
	if ncols%int64(t.BlockSize()) == 0 {
		return t
	}
	r := t
	switch t {
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
