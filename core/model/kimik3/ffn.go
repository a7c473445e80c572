package kimik3

import (
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
)

// situFFN is down(situ(gate·x, up·x)), the FFN of the dense lead layers and
// of the shared experts.
func (ps *pass) situFFN(gate, up, down *T, x []float32, n int) ([]float32, error) {
	gu, err := ps.matmuls(x, n, gate, up)
	if err != nil {
		return nil, err
	}
	ops.SiTU(gu[0], gu[1], ps.m.p.SituBeta, ps.m.p.SituLB)
	return ps.matmul(down, gu[0], n)
}

func (ps *pass) denseFFN(l *layer, x []float32) ([]float32, error) {
	return ps.situFFN(l.FFNGate, l.FFNUp, l.FFNDown, x, ps.n)
}

// moe is the latent MoE: the router scores the full-width input, the routed
// experts (moe.Runner) run on its down-projection to the latent width,
// their weighted sum is normed and projected back up, and the shared
// experts add their output at full width.
//
// With staged weights the runner hints the router's choice at once; the
// latent down-projection and the shared experts, which need no routed
// bytes, run while the stager reads.
func (ps *pass) moe(l *layer, x []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n
	lat := p.latent()

	b, err := ps.m.experts.Route(&l.routed, x, n, ps.sc)
	if err != nil {
		return nil, err
	}
	// The latent down-projection and the shared experts' gate and up in
	// one batch.
	proj, err := ps.matmuls(x, n, l.RoutedDown, l.GateSh, l.UpSh)
	if err != nil {
		return nil, err
	}
	in := x
	if l.RoutedDown != nil {
		in = proj[0]
	}
	var sh []float32
	if l.GateSh != nil {
		ops.SiTU(proj[1], proj[2], p.SituBeta, p.SituLB)
		if sh, err = ps.matmul(l.DownSh, proj[1], n); err != nil {
			return nil, err
		}
	}
	sum, err := ps.m.experts.Run(&l.routed, b, in, ps.sc)
	if err != nil {
		return nil, err
	}
	if l.RoutedNorm != nil {
		ops.RMSNorm(sum, sum, l.routedNorm, lat, p.Eps)
	}
	if l.RoutedUp != nil {
		if sum, err = ps.matmul(l.RoutedUp, sum, n); err != nil {
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
