package kimik3

import (
	"errors"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
)

// dense is the FFN of the leading dense layers.
type dense struct {
	Gate *T `gguf:"ffn_gate"`
	Up   *T `gguf:"ffn_up"`
	Down *T `gguf:"ffn_down"`
}

func (f *dense) checks(p *Params, il int) ([]shapeCheck, error) {
	e, ff := int64(p.Embd), int64(p.FF[il])
	return []shapeCheck{{f.Gate, []int64{e, ff}}, {f.Up, []int64{e, ff}}, {f.Down, []int64{ff, e}}}, nil
}

func (f *dense) prepare(func(*T) []float32) []*T { return []*T{f.Gate, f.Up, f.Down} }

func (f *dense) forward(ps *pass, x []float32) ([]float32, error) {
	return ps.m.experts.Dense(f.Gate, f.Up, f.Down, x, ps.n, ps.sc)
}

// sparse is the latent MoE FFN: routed experts at the latent width between
// a down and an up projection, and shared experts at full width.
type sparse struct {
	Router     *T `gguf:"ffn_gate_inp"`
	ProbsB     *T `gguf:"exp_probs_b.bias"`
	GateExps   *T `gguf:"ffn_gate_exps"`
	UpExps     *T `gguf:"ffn_up_exps"`
	DownExps   *T `gguf:"ffn_down_exps"`
	RoutedDown *T `gguf:"ffn_routed_down,optional"`
	RoutedUp   *T `gguf:"ffn_routed_up,optional"`
	RoutedNorm *T `gguf:"ffn_routed_norm,optional"`
	GateSh     *T `gguf:"ffn_gate_shexp,optional"`
	UpSh       *T `gguf:"ffn_up_shexp,optional"`
	DownSh     *T `gguf:"ffn_down_shexp,optional"`

	probsB, routedNorm []float32
	// routed is the routed part as the expert runner takes it.
	routed moe.Layer
}

func (f *sparse) checks(p *Params, il int) ([]shapeCheck, error) {
	e, ne, fe, lat := int64(p.Embd), int64(p.Router.Experts), int64(p.FFExp), int64(p.latent())
	var errs []error
	cs := []shapeCheck{{f.Router, []int64{e, ne}}, {f.ProbsB, []int64{ne}},
		{f.GateExps, []int64{lat, fe, ne}}, {f.UpExps, []int64{lat, fe, ne}}, {f.DownExps, []int64{fe, lat, ne}}}
	if p.Latent > 0 {
		errs = append(errs, need(il, f, "RoutedDown", "RoutedUp"))
		cs = append(cs, shapeCheck{f.RoutedDown, []int64{e, lat}}, shapeCheck{f.RoutedUp, []int64{lat, e}})
		if f.RoutedNorm != nil {
			cs = append(cs, shapeCheck{f.RoutedNorm, []int64{lat}})
		}
	}
	if f.GateSh != nil || f.UpSh != nil || f.DownSh != nil {
		errs = append(errs, need(il, f, "GateSh", "UpSh", "DownSh"))
		fs := fe * int64(max(p.Shared, 1))
		cs = append(cs, shapeCheck{f.GateSh, []int64{e, fs}}, shapeCheck{f.UpSh, []int64{e, fs}}, shapeCheck{f.DownSh, []int64{fs, e}})
	}
	return cs, errors.Join(errs...)
}

func (f *sparse) prepare(fl func(*T) []float32) []*T {
	f.probsB, f.routedNorm = fl(f.ProbsB), fl(f.RoutedNorm)
	r := &f.routed // its Index is set when the layer is made
	r.GateInp, r.Bias, r.GateExps, r.UpExps, r.DownExps = f.Router, f.probsB, f.GateExps, f.UpExps, f.DownExps
	return []*T{f.Router, f.GateExps, f.UpExps, f.DownExps, f.RoutedDown, f.RoutedUp, f.GateSh, f.UpSh, f.DownSh}
}

// forward: the router scores the full-width input, the routed experts
// (moe.Runner) run on its down-projection to the latent width, their
// weighted sum is normed and projected back up, and the shared experts
// add their output at full width.
//
// With staged weights the runner hints the router's choice at once; the
// latent down-projection and the shared experts, which need no routed
// bytes, run while the stager reads.
func (f *sparse) forward(ps *pass, x []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n

	b, err := ps.m.experts.Route(&f.routed, x, n, ps.sc)
	if err != nil {
		return nil, err
	}
	// The latent down-projection and the shared experts' gate and up in
	// one batch.
	proj, err := ps.matmuls(x, n, f.RoutedDown, f.GateSh, f.UpSh)
	if err != nil {
		return nil, err
	}
	in := x
	if f.RoutedDown != nil {
		in = proj[0]
	}
	var sh []float32
	if f.GateSh != nil {
		ops.SiTU(proj[1], proj[2], p.SituBeta, p.SituLB)
		if sh, err = ps.matmul(f.DownSh, proj[1], n); err != nil {
			return nil, err
		}
	}
	sum, err := ps.m.experts.Run(&f.routed, b, in, ps.sc)
	if err != nil {
		return nil, err
	}
	return f.up(ps, sum, sh)
}

// up is the FFN's output from the routed experts' sum (n rows of the
// latent width) and the shared experts' output sh (nil: none): the sum
// normed and projected up, plus sh.
func (f *sparse) up(ps *pass, sum, sh []float32) ([]float32, error) {
	p := ps.m.p
	var err error
	if f.RoutedNorm != nil {
		ops.RMSNorm(sum, sum, f.routedNorm, p.latent(), p.Eps)
	}
	if f.RoutedUp != nil {
		if sum, err = ps.matmul(f.RoutedUp, sum, ps.n); err != nil {
			return nil, err
		}
	}
	if sh != nil {
		ops.Add(sum, sh)
	}
	return sum, nil
}

// newRunner is the expert runner of m's MoE layers: K3's router and SiTU
// experts, reading routed experts through w when w stages them.
func (m *Model) newRunner(w model.Weights) *moe.Runner {
	p := m.p
	return &moe.Runner{
		Router: p.Router,
		Act:    func(gate, up []float32) { ops.SiTU(gate, up, p.SituBeta, p.SituLB) },
		Pool:   m.pool,
		Source: moe.SourceOf(w),
	}
}
