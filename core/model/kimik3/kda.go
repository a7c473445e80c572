package kimik3

import "github.com/k3-inference/k3/core/ops"

// kda is a Kimi Delta Attention layer: linear attention whose memory is a
// recurrent state (state.Recurrent), not a cache.
type kda struct {
	ConvQ *T `gguf:"ssm_conv1d_q"`
	ConvK *T `gguf:"ssm_conv1d_k"`
	ConvV *T `gguf:"ssm_conv1d_v"`
	Q     *T `gguf:"attn_q"`
	K     *T `gguf:"attn_k"`
	V     *T `gguf:"attn_v"`
	FA    *T `gguf:"ssm_f_a"`
	FB    *T `gguf:"ssm_f_b"`
	Beta  *T `gguf:"ssm_beta"`
	A     *T `gguf:"ssm_a,bare"`
	DtB   *T `gguf:"ssm_dt.bias"`
	G     *T `gguf:"ssm_g"`
	ONorm *T `gguf:"ssm_norm"`
	Out   *T `gguf:"attn_output"`

	convQ, convK, convV, a, dtB, oNorm []float32
}

func (l *kda) checks(p *Params, il int) ([]shapeCheck, error) {
	e, h := int64(p.Embd), int64(p.Heads)
	hd, k := int64(p.KDAHead), int64(p.ConvK)
	di := hd * h
	return []shapeCheck{
		{l.ConvQ, []int64{k, 1, di}}, {l.ConvK, []int64{k, 1, di}}, {l.ConvV, []int64{k, 1, di}},
		{l.Q, []int64{e, di}}, {l.K, []int64{e, di}}, {l.V, []int64{e, di}},
		{l.FA, []int64{e, hd}}, {l.FB, []int64{hd, di}}, {l.Beta, []int64{e, h}},
		{l.A, []int64{h}}, {l.DtB, []int64{di}}, {l.G, []int64{e, di}},
		{l.ONorm, []int64{hd}}, {l.Out, []int64{di, e}}}, nil
}

func (l *kda) prepare(fl func(*T) []float32) []*T {
	l.convQ, l.convK, l.convV, l.a, l.dtB, l.oNorm = fl(l.ConvQ), fl(l.ConvK), fl(l.ConvV), fl(l.A), fl(l.DtB), fl(l.ONorm)
	return []*T{l.Out, l.Q, l.K, l.V, l.FA, l.FB, l.Beta, l.G}
}

// forward runs the layer on the normed input x (n×Embd) with the
// recurrent state of layer il: q, k, v through their short causal
// convolutions with SiLU, L2-normed q and k, a per-channel decay gate, the
// gated delta rule, a per-head RMS norm times the sigmoid of the
// full-rank output gate, and the output projection.
func (l *kda) forward(ps *pass, il int, x []float32) ([]float32, error) {
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
		for _, sp := range ps.spans {
			lo, hi := sp.off*di, (sp.off+sp.n)*di
			ops.ConvStep(sp.seq.Rec[il].Conv[i], proj[i][lo:hi], conv, qkv[i][lo:hi], sp.n, di, p.ConvK)
		}
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
	for _, sp := range ps.spans {
		lo, hi := sp.off*di, (sp.off+sp.n)*di
		bs := beta[sp.off*H : (sp.off+sp.n)*H]
		ssm := sp.seq.Rec[il].SSM
		if ps.m.chunk > 0 && sp.n > 1 {
			dr.RunChunked(ps.m.pool, ssm, q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], bs, o[lo:hi], sp.n, ps.m.chunk)
		} else {
			dr.Run(ps.m.pool, ssm, q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], bs, o[lo:hi], sp.n)
		}
	}

	ops.RMSNorm(o, o, l.oNorm, S, p.Eps)
	for i := range o {
		o[i] *= ops.Sigmoid(gate[i])
	}
	return ps.matmul(l.Out, o, n)
}
