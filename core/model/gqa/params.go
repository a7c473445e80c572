// Package gqa is grouped-query self-attention with a KV cache, as
// llama.cpp's build_qkv and build_attn build it for the usual transformer
// families (Qwen, LLaMA, Mistral, ...): Q, K and V projections (separate
// or fused, optional biases), optional per-head RMS norms of Q and K,
// rotary positions, flash attention over an F16 cache whose rows hold
// every KV head's key then value, and the output projection. An
// architecture binds a Layer per block and calls Forward; the cache is a
// core/state HalfRows.
package gqa

import (
	"errors"
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
)

// Params are the attention hyperparameters, read as llama.cpp's
// load_hparams and llama_context read them.
type Params struct {
	Embd, Heads, HeadsKV int
	KDim, VDim           int // attention.key_length / value_length
	Eps                  float32
	Rope                 ops.Rope
	Scale                float32 // kq_scale, 1/sqrt(KDim) unless an architecture says otherwise
}

// ReadParams reads the attention keys every llama.cpp transformer shares:
// head counts (one value, or per layer when equal everywhere), head sizes
// (defaulting to embedding_length/head_count), the RMS norm epsilon, and
// the rope settings. neox selects GGML_ROPE_TYPE_NEOX (the architecture's
// llama_model_rope_type).
func ReadParams(c model.Config, neox bool) (*Params, error) {
	var errs []error
	need := func(key string) int {
		if !c.Has(key) {
			errs = append(errs, fmt.Errorf("missing key %q", key))
		}
		return int(c.Uint(key, 0))
	}
	p := &Params{Embd: need("embedding_length")}
	if !c.Has("attention.layer_norm_rms_epsilon") {
		errs = append(errs, errors.New(`missing key "attention.layer_norm_rms_epsilon"`))
	}
	p.Eps = float32(c.Float("attention.layer_norm_rms_epsilon", 0))
	var err error
	if p.Heads, err = uniform(c, "attention.head_count", 0); err != nil {
		errs = append(errs, err)
	}
	if p.HeadsKV, err = uniform(c, "attention.head_count_kv", p.Heads); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	switch {
	case p.Embd <= 0:
		return nil, fmt.Errorf("embedding_length %d", p.Embd)
	case p.Heads <= 0:
		return nil, fmt.Errorf("attention.head_count %d", p.Heads)
	case p.HeadsKV <= 0 || p.Heads%p.HeadsKV != 0:
		return nil, fmt.Errorf("attention.head_count_kv %d does not divide head_count %d", p.HeadsKV, p.Heads)
	}
	p.KDim = int(c.Uint("attention.key_length", uint64(p.Embd/p.Heads)))
	p.VDim = int(c.Uint("attention.value_length", uint64(p.Embd/p.Heads)))
	if p.KDim <= 0 || p.VDim <= 0 {
		return nil, fmt.Errorf("head sizes %d (key) and %d (value)", p.KDim, p.VDim)
	}
	p.Scale = 1 / float32(math.Sqrt(float64(p.KDim)))
	if p.Rope, err = readRope(c, p.KDim, neox); err != nil {
		return nil, err
	}
	return p, c.Err()
}

// uniform reads a per-layer key that this package needs equal on every
// layer (a scalar or an array of one value); def applies when it is absent.
func uniform(c model.Config, key string, def int) (int, error) {
	v := c.Ints(key)
	if v == nil {
		if def == 0 {
			return 0, fmt.Errorf("missing key %q", key)
		}
		return def, nil
	}
	for _, x := range v[1:] {
		if x != v[0] {
			return 0, fmt.Errorf("key %q varies by layer (%v), which is not supported", key, v)
		}
	}
	return int(v[0]), nil
}

// readRope is the rope configuration llama.cpp's context derives from the
// file: rope.freq_base (default 10000), rope.scaling.type (linear, none or
// yarn) with its factor, YaRN's original context and beta defaults, and
// the attention factor YaRN scales cos and sin by.
func readRope(c model.Config, headDim int, neox bool) (ops.Rope, error) {
	r := ops.Rope{
		Dims:       int(c.Uint("rope.dimension_count", uint64(headDim))),
		Neox:       neox,
		Base:       float32(c.Float("rope.freq_base", 10000)),
		FreqScale:  1,
		AttnFactor: 1,
		BetaFast:   32,
		BetaSlow:   1,
	}
	if r.Dims <= 0 || r.Dims%2 != 0 || r.Dims > headDim {
		return r, fmt.Errorf("rope.dimension_count %d for heads of %d", r.Dims, headDim)
	}
	typ := c.String("rope.scaling.type", "linear")
	factor := float32(c.Float("rope.scaling.factor", c.Float("rope.scale_linear", 0)))
	if factor != 0 {
		r.FreqScale = 1 / factor
	}
	train := int(c.Uint("context_length", 0))
	r.CtxOrig = int(c.Uint("rope.scaling.original_context_length", uint64(train)))
	switch typ {
	case "none":
		r.FreqScale = 1
	case "linear":
	case "yarn":
		r.ExtFactor = 1
		f := 1 / r.FreqScale
		mscale := func(m float32) float32 {
			if f <= 1 {
				return 1
			}
			return 0.1*m*ops.Logf(f) + 1
		}
		if logMul := float32(c.Float("rope.scaling.yarn_log_multiplier", 0)); logMul != 0 {
			r.AttnFactor = mscale(1) / mscale(logMul)
		} else {
			r.AttnFactor = mscale(1)
		}
		// ggml multiplies cos and sin by 1+0.1·ln(factor) itself when
		// ExtFactor is set; llama.cpp cancels that here.
		r.AttnFactor *= 1 / (1 + 0.1*ops.Logf(f))
	default:
		return r, fmt.Errorf("rope.scaling.type %q is not supported", typ)
	}
	r.AttnFactor *= float32(c.Float("rope.scaling.attn_factor", 1))
	return r, nil
}

// CacheStride is the half values one cached position takes in a layer:
// every KV head's key, then every KV head's value.
func (p *Params) CacheStride() int { return p.HeadsKV * (p.KDim + p.VDim) }
