package kimik3

import (
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

// kda is a Kimi Delta Attention layer on the normed input x (n×Embd):
// q, k, v through their short causal convolutions with SiLU, L2-normed q
// and k, a per-channel decay gate, the gated delta rule, a per-head RMS
// norm times the sigmoid of the full-rank output gate, and the output
// projection.
func (ps *pass) kda(l *layer, st *state.Recurrent, x []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n
	H, S := p.Heads, p.KDAHead
	di := H * S

	// Every projection of the input in one batch.
	proj, err := ps.matmuls(x, n, l.Q, l.K, l.V, l.FA, l.Beta, l.G)
	if err != nil {
		return nil, err
	}
	qkv := [3][]float32{}
	for i := range qkv {
		conv := [][]float32{l.convQ, l.convK, l.convV}[i]
		qkv[i] = ps.buf(n * di)
		ops.ConvStep(st.Conv[i], proj[i], conv, qkv[i], n, di, p.ConvK)
	}
	q, k, v := qkv[0], qkv[1], qkv[2]
	fa, beta, gate := proj[3], proj[4], proj[5]

	g, err := ps.matmul(l.FB, fa, n)
	if err != nil {
		return nil, err
	}
	for t := 0; t < n; t++ {
		for c := 0; c < di; c++ {
			i := t*di + c
			a := l.a[c/S] // -exp(A_log), folded at conversion
			g1 := g[i] + l.dtB[c]
			if p.GateLB > negInf {
				// lb·sigmoid(exp(A_log)·g1), in ggml's steps: mul by A, scale by -1, sigmoid, scale by lb
				g[i] = ops.Sigmoid((g1*a)*-1) * p.GateLB
			} else {
				g[i] = ops.Softplus(g1) * a
			}
		}
	}

	for i := range beta {
		beta[i] = ops.Sigmoid(beta[i])
	}

	ops.L2Norm(q, S, p.Eps)
	ops.L2Norm(k, S, p.Eps)
	o := ps.buf(n * di)
	dr := ops.DeltaRule{Heads: H, Dim: S, KDA: true}
	if ps.m.chunk > 0 && n > 1 {
		dr.RunChunked(ps.m.pool, st.SSM, q, k, v, g, beta, o, n, ps.m.chunk)
	} else {
		dr.Run(ps.m.pool, st.SSM, q, k, v, g, beta, o, n)
	}

	ops.RMSNorm(o, o, l.oNorm, S, p.Eps)
	for i := range o {
		o[i] *= ops.Sigmoid(gate[i])
	}
	return ps.matmul(l.Out, o, n)
}
