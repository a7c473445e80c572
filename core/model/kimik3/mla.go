package kimik3

import (
	"math"

	"github.com/k3-inference/k3/core/model/mla"
)

// mlaAttn is a nope-only multi-head latent attention layer (core/model/mla
// with no rotation, keys expanded as [pe, k_nope], and K3's output gate).
// Its memory is a cache of half rows (state.HalfRows).
type mlaAttn struct{ mla.Layer }

// mlaShape is K3's MLA as core/model/mla takes it.
func (p *Params) mlaShape() *mla.Shape {
	return &mla.Shape{
		Embd: p.Embd, Heads: p.Heads, KDim: p.kDim(), VDim: p.vDim(), KVLora: p.KVLora, QLora: p.QLora, Rot: p.Rot,
		Eps: p.Eps, Scale: 1 / float32(math.Sqrt(float64(p.kDim()))), PeFirst: true,
	}
}

func (l *mlaAttn) checks(p *Params, il int) ([]shapeCheck, error) {
	cs, err := l.Checks(p.mlaShape(), il)
	out := make([]shapeCheck, len(cs))
	for i, c := range cs {
		out[i] = shapeCheck{c.T, c.Shape}
	}
	return out, err
}

func (l *mlaAttn) prepare(fl func(*T) []float32) []*T { return l.Prepare(fl) }

func (l *mlaAttn) forward(ps *pass, il int, x []float32) ([]float32, error) {
	spans := make([]mla.Span, len(ps.spans))
	for i, sp := range ps.spans {
		spans[i] = mla.Span{Off: sp.off, N: sp.n, Pos: sp.pos, Ctx: sp.seq.Ctx, Cache: sp.seq.Cache[il]}
	}
	return l.Forward(ps.m.mla, &mla.Pass{Work: ps.work(), N: ps.n, Spans: spans}, x)
}
