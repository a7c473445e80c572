package kimik3

import (
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
)

// situFFN is down(situ(gate·x, up·x)), the FFN of the dense lead layers and
// of the shared experts.
func (ps *pass) situFFN(gate, up, down *T, x []float32, n int) ([]float32, error) {
	g, err := ps.matmul(gate, x, n)
	if err != nil {
		return nil, err
	}
	u, err := ps.matmul(up, x, n)
	if err != nil {
		return nil, err
	}
	ops.SiTU(g, u, ps.m.p.SituBeta, ps.m.p.SituLB)
	return ps.matmul(down, g, n)
}

func (ps *pass) denseFFN(l *layer, x []float32) ([]float32, error) {
	return ps.situFFN(l.FFNGate, l.FFNUp, l.FFNDown, x, ps.n)
}

// moe is the latent MoE: the router scores the full-width input, the routed
// experts run on its down-projection to the latent width, their weighted
// sum is normed and projected back up, and the shared experts add their
// output at full width. Tokens are grouped by expert, so each chosen
// expert's weights are read once for the whole batch.
//
// With staged weights the router runs first and its choice is hinted at
// once; the latent down-projection and the shared experts, which need no
// routed bytes, run while the stager reads.
func (ps *pass) moe(il int, l *layer, x []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n
	lat, k := p.latent(), p.Router.Used

	b, err := ps.route(l, x)
	if err != nil {
		return nil, err
	}
	src := ps.m.experts
	if src != nil {
		if err := src.HintExperts(il, b.Experts, false); err != nil {
			return nil, err
		}
	}
	in := x
	if l.RoutedDown != nil {
		if in, err = ps.matmul(l.RoutedDown, x, n); err != nil {
			return nil, err
		}
	}
	var sh []float32
	if l.GateSh != nil {
		if sh, err = ps.situFFN(l.GateSh, l.UpSh, l.DownSh, x, n); err != nil {
			return nil, err
		}
	}
	ex, err := ps.m.expertMats(il, l, b.Experts)
	if err != nil {
		return nil, err
	}
	outs, err := ps.experts(b, ex, in)
	if rerr := ex.release(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	// ggml adds the experts' outputs in slot order.
	sum := make([]float32, n*lat)
	for t := 0; t < n; t++ {
		o := sum[t*lat : (t+1)*lat]
		copy(o, outs[t*k*lat:(t*k+1)*lat])
		for s := 1; s < k; s++ {
			ops.Add(o, outs[(t*k+s)*lat:(t*k+s+1)*lat])
		}
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

// route scores x with l's router and groups the batch's tokens by expert.
func (ps *pass) route(l *layer, x []float32) (*moe.Batch, error) {
	p, n := ps.m.p, ps.n
	k, ne := p.Router.Used, p.Router.Experts
	logits, err := ps.matmul(l.Router, x, n)
	if err != nil {
		return nil, err
	}
	b := new(moe.Batch)
	b.Reset(n, k)
	ps.m.pool.For(n, 8, func(lo, hi int) {
		var s moe.Scratch
		for t := lo; t < hi; t++ {
			p.Router.Route(logits[t*ne:(t+1)*ne], l.probsB, b.IDs[t*k:(t+1)*k], b.Weights[t*k:(t+1)*k], &s)
		}
	})
	b.Group(ne)
	return b, nil
}

// experts runs each chosen expert on the tokens routed to it and returns
// outs, where outs[(t*k+slot)*lat:] is expert slot's weighted output for
// token t.
func (ps *pass) experts(b *moe.Batch, ex *expertMats, in []float32) ([]float32, error) {
	p := ps.m.p
	lat, k := p.latent(), p.Router.Used
	outs := make([]float32, ps.n*k*lat)
	fe := p.FFExp
	for i := range b.Experts {
		sel := b.Rows[b.Start[i]:b.Start[i+1]]
		m := len(sel)
		xe := make([]float32, m*lat)
		for r, row := range sel {
			t := int(row) / k
			copy(xe[r*lat:(r+1)*lat], in[t*lat:(t+1)*lat])
		}
		gate, up, down := ex.mats(i)
		g := make([]float32, m*fe)
		u := make([]float32, m*fe)
		if err := ps.m.pool.MatMul(gate, xe, m, g); err != nil {
			return nil, err
		}
		if err := ps.m.pool.MatMul(up, xe, m, u); err != nil {
			return nil, err
		}
		ops.SiTU(g, u, p.SituBeta, p.SituLB)
		d := make([]float32, m*lat)
		if err := ps.m.pool.MatMul(down, g, m, d); err != nil {
			return nil, err
		}
		for r, row := range sel {
			w := b.Weights[row]
			dst := outs[int(row)*lat : (int(row)+1)*lat]
			for j, v := range d[r*lat : (r+1)*lat] {
				dst[j] = v * w
			}
		}
	}
	return outs, nil
}
