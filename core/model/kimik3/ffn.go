package kimik3

import (
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
	outs, err := ps.routed(il, l, b, in)
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

// routed runs each chosen expert on the tokens routed to it and returns
// outs, where outs[(t*k+slot)*lat:] is expert slot's weighted output for
// token t. When a stager cannot hold all of them at once, the experts run
// in parts, each acquired (and the next one hinted) before it runs and
// released after; every expert is still read once per batch.
func (ps *pass) routed(il int, l *layer, b *moe.Batch, in []float32) ([]float32, error) {
	p := ps.m.p
	outs := make([]float32, ps.n*p.Router.Used*p.latent())
	part := len(b.Experts)
	if src := ps.m.experts; src != nil {
		part = min(part, src.MaxExperts(il))
	}
	for lo := 0; lo < len(b.Experts); lo += part {
		hi := min(lo+part, len(b.Experts))
		ex, err := ps.m.expertMats(il, l, b.Experts, lo, hi)
		if err != nil {
			return nil, err
		}
		if hi < len(b.Experts) {
			err = ps.m.experts.HintExperts(il, b.Experts[hi:min(hi+part, len(b.Experts))], false)
		}
		if err == nil {
			err = ps.experts(b, ex, in, outs, lo, hi)
		}
		if rerr := ex.release(); err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// experts runs the chosen experts [lo, hi) into outs. The experts' gate and
// up products go in one batch, their down products in another, in groups
// whose buffers stay under groupBytes.
func (ps *pass) experts(b *moe.Batch, ex *expertMats, in, outs []float32, lo, end int) error {
	p := ps.m.p
	lat, fe := p.latent(), p.FFExp
	const groupBytes = 64 << 20
	perRow := 4 * (2*lat + 2*fe)
	for lo < end {
		hi, rows := lo, 0
		for hi < end && (hi == lo || (rows+int(b.Start[hi+1]-b.Start[hi]))*perRow <= groupBytes) {
			rows += int(b.Start[hi+1] - b.Start[hi])
			hi++
		}
		if err := ps.expertGroup(b, ex, in, outs, lo, hi); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// expertGroup runs experts [lo, hi) of the batch.
func (ps *pass) expertGroup(b *moe.Batch, ex *expertMats, in, outs []float32, lo, hi int) error {
	p := ps.m.p
	lat, k, fe := p.latent(), p.Router.Used, p.FFExp
	type run struct{ g, u, d []float32 }
	runs := make([]run, hi-lo)
	gu := make([]ops.MatMulOp, 0, 2*(hi-lo))
	down := make([]ops.MatMulOp, 0, hi-lo)
	for i := lo; i < hi; i++ {
		sel := b.Rows[b.Start[i]:b.Start[i+1]]
		m := len(sel)
		xe := ps.buf(m * lat)
		for r, row := range sel {
			t := int(row) / k
			copy(xe[r*lat:(r+1)*lat], in[t*lat:(t+1)*lat])
		}
		gate, up, dw := ex.mats(i)
		r := run{g: ps.buf(m * fe), u: ps.buf(m * fe), d: ps.buf(m * lat)}
		runs[i-lo] = r
		gu = append(gu, ops.MatMulOp{W: gate, X: xe, N: m, Out: r.g}, ops.MatMulOp{W: up, X: xe, N: m, Out: r.u})
		down = append(down, ops.MatMulOp{W: dw, X: r.g, N: m, Out: r.d})
	}
	if err := ps.m.pool.MatMuls(gu...); err != nil {
		return err
	}
	for _, r := range runs {
		ops.SiTU(r.g, r.u, p.SituBeta, p.SituLB)
	}
	if err := ps.m.pool.MatMuls(down...); err != nil {
		return err
	}
	for i := lo; i < hi; i++ {
		sel := b.Rows[b.Start[i]:b.Start[i+1]]
		d := runs[i-lo].d
		for r, row := range sel {
			w := b.Weights[row]
			dst := outs[int(row)*lat : (int(row)+1)*lat]
			for j, v := range d[r*lat : (r+1)*lat] {
				dst[j] = v * w
			}
		}
	}
	return nil
}
