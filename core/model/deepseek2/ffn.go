package deepseek2

import (
	"errors"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
)

func chk(t *T, shape ...int64) model.ShapeCheck { return model.ShapeCheck{T: t, Shape: shape} }

// dense is the SiLU FFN of the leading dense layers.
type dense struct {
	Gate *T `gguf:"ffn_gate"`
	Up   *T `gguf:"ffn_up"`
	Down *T `gguf:"ffn_down"`
}

func (f *dense) checks(p *Params, il int) ([]model.ShapeCheck, error) {
	e, ff := int64(p.Embd), int64(p.FF[il])
	return []model.ShapeCheck{chk(f.Gate, e, ff), chk(f.Up, e, ff), chk(f.Down, ff, e)}, nil
}

func (f *dense) prepare(func(*T) []float32) []*T { return []*T{f.Gate, f.Up, f.Down} }

func (f *dense) forward(ps *pass, x []float32) ([]float32, error) {
	return ps.m.experts.Dense(f.Gate, f.Up, f.Down, x, ps.n, ps.sc)
}

// sparse is an MoE FFN: routed experts (core/moe) plus shared experts,
// all SiLU-gated, at full width.
type sparse struct {
	Router   *T `gguf:"ffn_gate_inp"`
	ProbsB   *T `gguf:"exp_probs_b.bias,optional"`
	GateExps *T `gguf:"ffn_gate_exps"`
	UpExps   *T `gguf:"ffn_up_exps"`
	DownExps *T `gguf:"ffn_down_exps"`
	GateSh   *T `gguf:"ffn_gate_shexp"`
	UpSh     *T `gguf:"ffn_up_shexp"`
	DownSh   *T `gguf:"ffn_down_shexp"`

	routed moe.Layer
}

func (f *sparse) checks(p *Params, il int) ([]model.ShapeCheck, error) {
	e, ne, fe := int64(p.Embd), int64(p.Router.Experts), int64(p.FFExp)
	fs := fe * int64(p.Shared)
	cs := []model.ShapeCheck{chk(f.Router, e, ne), chk(f.GateExps, e, fe, ne), chk(f.UpExps, e, fe, ne), chk(f.DownExps, fe, e, ne),
		chk(f.GateSh, e, fs), chk(f.UpSh, e, fs), chk(f.DownSh, fs, e)}
	if f.ProbsB != nil {
		cs = append(cs, chk(f.ProbsB, ne))
	}
	if p.Shared <= 0 {
		return cs, errors.New("expert_shared_count is 0 but llama.cpp's deepseek2 requires the shared expert tensors")
	}
	return cs, nil
}

func (f *sparse) prepare(fl func(*T) []float32) []*T {
	r := &f.routed // its Index is set when the layer is made
	r.GateInp, r.Bias, r.GateExps, r.UpExps, r.DownExps = f.Router, fl(f.ProbsB), f.GateExps, f.UpExps, f.DownExps
	return []*T{f.Router, f.GateExps, f.UpExps, f.DownExps, f.GateSh, f.UpSh, f.DownSh}
}

// forward routes x (hinting the stager at once), runs the shared experts
// while the routed ones are read, then the routed experts, and adds the
// two as llama.cpp does (moe_out + shexp).
func (f *sparse) forward(ps *pass, x []float32) ([]float32, error) {
	r := ps.m.experts
	b, err := r.Route(&f.routed, x, ps.n, ps.sc)
	if err != nil {
		return nil, err
	}
	sh, err := r.Dense(f.GateSh, f.UpSh, f.DownSh, x, ps.n, ps.sc)
	if err != nil {
		return nil, err
	}
	sum, err := r.Run(&f.routed, b, x, ps.sc)
	if err != nil {
		return nil, err
	}
	ops.Add(sum, sh)
	return sum, nil
}
