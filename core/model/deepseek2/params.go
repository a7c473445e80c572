// Package deepseek2 is llama.cpp's deepseek2 forward pass (DeepSeek V2/V3/R1,
// Kimi K2), following src/models/deepseek2.cpp: multi-head latent attention
// (core/model/mla) with YaRN RoPE on its pe part, leading dense SiLU FFN
// layers, then MoE layers of routed experts (core/moe's runner) plus shared
// experts.
package deepseek2

import (
	"errors"
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/mla"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
)

// Params are the hyperparameters as llama.cpp reads them
// (llama_model::load_hparams, llama_model_deepseek2::load_arch_hparams,
// and llama_context's YaRN adjustments), with the same defaults.
type Params struct {
	Embd, Layers, Heads int
	Eps                 float32
	DenseLead           int
	FF                  []int // feed_forward_length per layer (dense layers)
	FFExp, Shared       int
	Router              moe.Router
	// MLA is the attention shape; Absorbed is llama.cpp's is_mla(): the
	// file has attn_k_b/attn_v_b and the *_mla head sizes, else attn_kv_b.
	MLA      mla.Shape
	Absorbed bool
	Rope     ops.Rope
}

func perLayer(c model.Config, key string, n int) ([]int, error) {
	v := c.Ints(key)
	out := make([]int, n)
	switch len(v) {
	case 0:
	case 1:
		for i := range out {
			out[i] = int(v[0])
		}
	case n:
		for i := range out {
			out[i] = int(v[i])
		}
	default:
		return nil, fmt.Errorf("key %q has %d values for %d layers", key, len(v), n)
	}
	return out, nil
}

func readParams(c model.Config) (*Params, error) {
	var errs []error
	need := func(key string) uint64 {
		if !c.Has(key) {
			errs = append(errs, fmt.Errorf("missing key %q", key))
		}
		return c.Uint(key, 0)
	}
	all := int(need("block_count"))
	nextn := int(c.Uint("nextn_predict_layers", 0))
	p := &Params{
		Embd:      int(need("embedding_length")),
		Layers:    all - nextn, // the MTP blocks follow the trunk; k3 does not run them
		Eps:       float32(c.Float("attention.layer_norm_rms_epsilon", 0)),
		DenseLead: int(c.Uint("leading_dense_block_count", 0)),
		Shared:    int(need("expert_shared_count")),
	}
	if !c.Has("attention.layer_norm_rms_epsilon") {
		errs = append(errs, errors.New(`missing key "attention.layer_norm_rms_epsilon"`))
	}
	kvLora := int(need("attention.kv_lora_rank"))
	vocab := c.Uint("vocab_size", 0)
	// llama.cpp's "lite" files (DeepSeek-V2-Lite and kin) have no q LoRA and
	// are recognised by their layer count.
	lite := p.Layers == 27 || p.Layers == 26 || (p.Layers == 48 && vocab == 128256)
	qLora := 0
	if lite {
		qLora = int(c.Uint("attention.q_lora_rank", 0))
	} else {
		qLora = int(need("attention.q_lora_rank"))
	}
	if c.Float("attention.temperature_scale", 0) != 0 {
		errs = append(errs, errors.New("attention temperature scaling (attention.temperature_scale) is not supported"))
	}
	if len(errs) > 0 || p.Layers <= 0 || nextn < 0 || nextn > all {
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("block_count %d with %d MTP layers", all, nextn))
		}
		return nil, errors.Join(errs...)
	}
	heads, err := perLayer(c, "attention.head_count", all)
	if err != nil {
		return nil, err
	}
	p.Heads = heads[0]
	if p.Heads <= 0 {
		return nil, fmt.Errorf("attention.head_count %d", p.Heads)
	}
	if p.FF, err = perLayer(c, "feed_forward_length", all); err != nil {
		return nil, err
	}
	ffExp, err := perLayer(c, "expert_feed_forward_length", all)
	if err != nil {
		return nil, err
	}
	p.FFExp = ffExp[0]

	keyLen := int(c.Uint("attention.key_length", uint64(p.Embd/p.Heads)))
	valLen := int(c.Uint("attention.value_length", uint64(p.Embd/p.Heads)))
	keyMLA, valMLA := int(c.Uint("attention.key_length_mla", 0)), int(c.Uint("attention.value_length_mla", 0))
	p.Absorbed = keyMLA != 0 && valMLA != 0
	if (keyMLA == 0) != (valMLA == 0) {
		return nil, fmt.Errorf("attention.key_length_mla %d and value_length_mla %d: both or neither", keyMLA, valMLA)
	}
	kd, vd := keyLen, valLen
	if p.Absorbed {
		kd, vd = keyMLA, valMLA
	}
	rot := int(c.Uint("rope.dimension_count", uint64(keyLen)))

	gating := moe.Gating(c.Uint("expert_gating_func", 0))
	if gating == moe.GatingNone {
		// DeepSeek V2 files have no gating key; GLM 4.7 Lite's are sigmoid.
		gating = moe.GatingSoftmax
		if (p.Layers == 47 || p.Layers == 48) && vocab == 154880 {
			gating = moe.GatingSigmoid
		}
	}
	p.Router = moe.Router{
		Experts:     int(c.Uint("expert_count", 0)),
		Used:        int(c.Uint("expert_used_count", 0)),
		Gating:      gating,
		NormWeights: c.Bool("expert_weights_norm", false),
		Scale:       float32(c.Float("expert_weights_scale", 0)),
		Groups:      int(c.Uint("expert_group_count", 0)),
		GroupsUsed:  int(c.Uint("expert_group_used_count", 0)),
	}
	if p.Rope, err = readRope(c, rot); err != nil {
		return nil, err
	}
	logMul := float32(c.Float("rope.scaling.yarn_log_multiplier", 0)) / 0.1 // the converter's factor, cancelled
	// deepseek2.cpp pre-scales kq_scale with the mscale that the context's
	// attention factor had cancelled.
	fs := p.Rope.FreqScale
	orig := p.Rope.AttnFactor * (1 + float32(0.1*ops.Logf(1/fs)))
	mscale := orig * (1 + float32(float32(0.1*logMul)*ops.Logf(1/fs)))
	p.MLA = mla.Shape{
		Embd: p.Embd, Heads: p.Heads, KDim: kd, VDim: vd, KVLora: kvLora, QLora: qLora, Rot: rot, Eps: p.Eps,
		Scale: float32(mscale*mscale) / float32(math.Sqrt(float64(kd))),
	}
	p.MLA.Rope = &p.Rope
	if err := c.Err(); err != nil {
		return nil, err
	}
	return p, p.validate()
}

// readRope is llama.cpp's rope setup for the file: freq base and scaling
// from the file, YaRN's extrapolation mix and attention factor as
// llama_context derives them (deepseek2 reads no yarn_* overrides).
func readRope(c model.Config, rot int) (ops.Rope, error) {
	r := ops.Rope{
		Dims: rot, Base: float32(c.Float("rope.freq_base", 10000)), FreqScale: 1,
		AttnFactor: 1, BetaFast: 32, BetaSlow: 1,
	}
	ctxTrain := c.Uint("context_length", 0)
	r.CtxOrig = int(c.Uint("rope.scaling.original_context_length", ctxTrain))
	factor := float32(c.Float("rope.scaling.factor", 0))
	if factor == 0 {
		factor = float32(c.Float("rope.scale_linear", 0))
	}
	if factor != 0 {
		r.FreqScale = 1 / factor
	}
	switch typ := c.String("rope.scaling.type", "linear"); typ {
	case "none":
		r.FreqScale = 1
	case "linear":
	case "yarn":
		r.ExtFactor = 1
	default:
		return r, fmt.Errorf("rope.scaling.type %q is not supported", typ)
	}
	if r.ExtFactor != 0 {
		getMscale := func(scale, m float32) float32 {
			if scale <= 1 {
				return 1
			}
			return float32(float32(0.1*m)*ops.Logf(scale)) + 1
		}
		f := 1 / r.FreqScale
		if logMul := float32(c.Float("rope.scaling.yarn_log_multiplier", 0)) / 0.1; logMul != 0 {
			m := float32(1)
			if logMul != 1 {
				m = logMul
			}
			r.AttnFactor = getMscale(f, m) / getMscale(f, logMul)
		} else {
			r.AttnFactor = getMscale(f, 1)
		}
		r.AttnFactor *= 1 / (1 + float32(0.1*ops.Logf(f)))
	}
	r.AttnFactor *= float32(c.Float("rope.scaling.attn_factor", 1))
	return r, nil
}

func (p *Params) validate() error {
	s := &p.MLA
	switch {
	case p.Embd <= 0:
		return fmt.Errorf("embedding_length %d", p.Embd)
	case s.KVLora <= 0:
		return fmt.Errorf("attention.kv_lora_rank %d", s.KVLora)
	case s.Rot <= 0 || s.Rot%2 != 0:
		return fmt.Errorf("rope.dimension_count %d", s.Rot)
	case s.KDim <= s.Rot:
		return fmt.Errorf("key length %d leaves no un-rotated part beside rope.dimension_count %d", s.KDim, s.Rot)
	case s.VDim <= 0:
		return fmt.Errorf("value length %d", s.VDim)
	case p.DenseLead > p.Layers:
		return fmt.Errorf("leading_dense_block_count %d > block_count %d", p.DenseLead, p.Layers)
	case p.Rope.Base <= 0:
		return fmt.Errorf("rope.freq_base %g", p.Rope.Base)
	case p.Rope.ExtFactor != 0 && p.Rope.CtxOrig <= 0:
		return errors.New("YaRN needs rope.scaling.original_context_length or context_length")
	}
	for il := range p.DenseLead {
		if p.FF[il] <= 0 {
			return fmt.Errorf("layer %d is dense but feed_forward_length is %d", il, p.FF[il])
		}
	}
	if p.DenseLead < p.Layers {
		if p.FFExp <= 0 {
			return fmt.Errorf("expert_feed_forward_length %d", p.FFExp)
		}
		if err := p.Router.Validate(); err != nil {
			return err
		}
	}
	return nil
}
