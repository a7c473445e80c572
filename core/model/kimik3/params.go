// Package kimik3 is the Kimi K3 forward pass (general.architecture
// "kimi-k3"), following llama.cpp's src/models/kimi-k3.cpp: KDA linear
// attention and nope-only MLA layers, cross-layer attention residuals, a
// latent MoE with SiTU experts, and shared experts at full width.
package kimik3

import (
	"errors"
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/moe"
)

// Params are Kimi K3's hyperparameters, read as llama.cpp reads them
// (llama_model_base::load_hparams and llama_model_kimi_k3::load_arch_hparams)
// with the same defaults.
type Params struct {
	Embd, Layers, Heads int
	HeadsKV             []int // per layer; 0 marks a KDA layer
	Eps                 float32

	// MLA
	KeyMLA, ValMLA int // attention.key_length_mla / value_length_mla
	QLora, KVLora  int
	Rot            int // rope.dimension_count: the un-rotated "pe" part of K3's nope-only MLA
	KeyLen         int // attention.key_length (used when the MLA keys are 0)

	// KDA
	ConvK, KDAHead int
	GateLB         float32 // kda.gate_lower_bound; -Inf selects the softplus gate

	// FFN / MoE
	FF        []int // feed_forward_length per layer (dense lead layers)
	FFExp     int
	Shared    int
	DenseLead int
	Latent    int // expert_latent_length; 0: experts run at Embd
	Router    moe.Router

	ResBlock         int // attn_res.block_size; 0: plain residual
	SituBeta, SituLB float32
}

func perLayer(c model.Config, key string, n int, def int64, required bool) ([]int, error) {
	v := c.Ints(key)
	if v == nil {
		if required {
			return nil, fmt.Errorf("missing key %q", key)
		}
		v = []int64{def}
	}
	out := make([]int, n)
	switch len(v) {
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
	p := &Params{
		Embd:      int(need("embedding_length")),
		Layers:    int(need("block_count")),
		Eps:       float32(c.Float("attention.layer_norm_rms_epsilon", 0)),
		KeyMLA:    int(need("attention.key_length_mla")),
		ValMLA:    int(need("attention.value_length_mla")),
		QLora:     int(c.Uint("attention.q_lora_rank", 0)),
		KVLora:    int(need("attention.kv_lora_rank")),
		ConvK:     int(need("ssm.conv_kernel")),
		KDAHead:   int(need("kda.head_dim")),
		GateLB:    float32(c.Float("kda.gate_lower_bound", math.Inf(-1))),
		Shared:    int(need("expert_shared_count")),
		DenseLead: int(c.Uint("leading_dense_block_count", 0)),
		Latent:    int(c.Uint("expert_latent_length", 0)),
		ResBlock:  int(need("attn_res.block_size")),
		SituBeta:  float32(c.Float("activation.situ_beta", 1)),
		SituLB:    float32(c.Float("activation.situ_linear_beta", 0)),
	}
	if !c.Has("attention.layer_norm_rms_epsilon") {
		errs = append(errs, errors.New(`missing key "attention.layer_norm_rms_epsilon"`))
	}
	for _, k := range []string{"activation.situ_beta", "activation.situ_linear_beta", "expert_gating_func"} {
		if !c.Has(k) {
			errs = append(errs, fmt.Errorf("missing key %q", k))
		}
	}
	if len(errs) > 0 || p.Layers <= 0 {
		if p.Layers <= 0 && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("block_count %d", p.Layers))
		}
		return nil, errors.Join(errs...)
	}
	n := p.Layers
	heads, err := perLayer(c, "attention.head_count", n, 0, true)
	if err != nil {
		return nil, err
	}
	p.Heads = heads[0]
	if p.HeadsKV, err = perLayer(c, "attention.head_count_kv", n, int64(p.Heads), false); err != nil {
		return nil, err
	}
	if p.FF, err = perLayer(c, "feed_forward_length", n, 0, false); err != nil {
		return nil, err
	}
	ffExp, err := perLayer(c, "expert_feed_forward_length", n, 0, true)
	if err != nil {
		return nil, err
	}
	p.FFExp = ffExp[0]
	used, err := perLayer(c, "expert_used_count", n, 0, false)
	if err != nil {
		return nil, err
	}
	if p.Heads <= 0 {
		return nil, fmt.Errorf("attention.head_count %d", p.Heads)
	}
	p.KeyLen = int(c.Uint("attention.key_length", uint64(p.Embd/p.Heads)))
	p.Rot = int(c.Uint("rope.dimension_count", uint64(p.KeyLen)))
	p.Router = moe.Router{
		Experts:     int(c.Uint("expert_count", 0)),
		Used:        used[0],
		Gating:      moe.Gating(c.Uint("expert_gating_func", 0)),
		NormWeights: c.Bool("expert_weights_norm", false),
		Scale:       float32(c.Float("expert_weights_scale", 0)),
		Groups:      int(c.Uint("expert_group_count", 0)),
		GroupsUsed:  int(c.Uint("expert_group_used_count", 0)),
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return p, p.validate()
}

func (p *Params) validate() error {
	switch {
	case p.Embd <= 0:
		return fmt.Errorf("embedding_length %d", p.Embd)
	case p.ConvK < 2:
		return fmt.Errorf("ssm.conv_kernel %d", p.ConvK)
	case p.KDAHead <= 0:
		return fmt.Errorf("kda.head_dim %d", p.KDAHead)
	case p.KVLora <= 0:
		return fmt.Errorf("attention.kv_lora_rank %d", p.KVLora)
	case p.kDim() < p.Rot:
		return fmt.Errorf("MLA key length %d is shorter than rope.dimension_count %d", p.kDim(), p.Rot)
	case p.ResBlock < 0:
		return fmt.Errorf("attn_res.block_size %d", p.ResBlock)
	case p.SituBeta == 0:
		return errors.New("activation.situ_beta is 0")
	case p.DenseLead > p.Layers:
		return fmt.Errorf("leading_dense_block_count %d > block_count %d", p.DenseLead, p.Layers)
	}
	if p.DenseLead < p.Layers {
		if err := p.Router.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// recurrent reports whether layer il is a KDA layer.
func (p *Params) recurrent(il int) bool { return p.HeadsKV[il] == 0 }

// kDim and vDim are the MLA per-head key and value widths
// (hparams.n_embd_head_k_mla / n_embd_head_v_mla).
func (p *Params) kDim() int {
	if p.KeyMLA == 0 && p.ValMLA == 0 {
		return p.KeyLen
	}
	return p.KeyMLA
}

func (p *Params) vDim() int {
	if p.KeyMLA == 0 && p.ValMLA == 0 {
		return p.KVLora // K3 sets n_embd_head_v_full to the latent width
	}
	return p.ValMLA
}

func (p *Params) latent() int {
	if p.Latent > 0 {
		return p.Latent
	}
	return p.Embd
}
