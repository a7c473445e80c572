package gqa

import (
	"errors"
	"fmt"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

type T = model.Tensor

// Layer is one block's attention, its tensors bound by model.Bind under
// the block's prefix. Either QKV (fused) or Q, K and V are present.
type Layer struct {
	Q     *T `gguf:"attn_q,optional"`
	K     *T `gguf:"attn_k,optional"`
	V     *T `gguf:"attn_v,optional"`
	QKV   *T `gguf:"attn_qkv,optional"`
	QB    *T `gguf:"attn_q.bias,optional"`
	KB    *T `gguf:"attn_k.bias,optional"`
	VB    *T `gguf:"attn_v.bias,optional"`
	QKVB  *T `gguf:"attn_qkv.bias,optional"`
	QNorm *T `gguf:"attn_q_norm,optional"`
	KNorm *T `gguf:"attn_k_norm,optional"`
	Out   *T `gguf:"attn_output"`

	qb, kb, vb, qkvb, qNorm, kNorm []float32
}

// Check verifies the presence and shapes llama.cpp's loader requires;
// norms says whether the per-head Q and K norms are required (Qwen3).
func (l *Layer) Check(p *Params, il int, norms bool) error {
	e, q, kv := int64(p.Embd), int64(p.Heads*p.KDim), int64(p.HeadsKV*p.KDim)
	vv := int64(p.HeadsKV * p.VDim)
	type check struct {
		t     *T
		shape []int64
	}
	var cs []check
	var errs []error
	missing := func(what string) { errs = append(errs, fmt.Errorf("layer %d: missing %s", il, what)) }
	if l.QKV != nil {
		cs = append(cs, check{l.QKV, []int64{e, q + kv + vv}}, check{l.QKVB, []int64{q + kv + vv}})
	} else {
		if l.Q == nil || l.K == nil || l.V == nil {
			missing(fmt.Sprintf("tensors blk.%d.attn_q/attn_k/attn_v.weight (or attn_qkv)", il))
		}
		cs = append(cs, check{l.Q, []int64{e, q}}, check{l.K, []int64{e, kv}}, check{l.V, []int64{e, vv}},
			check{l.QB, []int64{q}}, check{l.KB, []int64{kv}}, check{l.VB, []int64{vv}})
	}
	if norms && (l.QNorm == nil || l.KNorm == nil) {
		missing(fmt.Sprintf("tensors blk.%d.attn_q_norm/attn_k_norm.weight", il))
	}
	cs = append(cs, check{l.QNorm, []int64{int64(p.KDim)}}, check{l.KNorm, []int64{int64(p.KDim)}},
		check{l.Out, []int64{int64(p.Heads * p.VDim), e}})
	for _, c := range cs {
		if c.t != nil {
			if err := c.t.CheckShape(c.shape...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Prepare makes the float views of the small tensors and returns the
// matrices, which need a dot product.
func (l *Layer) Prepare() ([]*T, error) {
	var errs []error
	fl := func(t *T) []float32 {
		if t == nil {
			return nil
		}
		f, err := t.Floats()
		errs = append(errs, err)
		return f
	}
	l.qb, l.kb, l.vb, l.qkvb = fl(l.QB), fl(l.KB), fl(l.VB), fl(l.QKVB)
	l.qNorm, l.kNorm = fl(l.QNorm), fl(l.KNorm)
	return []*T{l.Q, l.K, l.V, l.QKV, l.Out}, errors.Join(errs...)
}

// Pass is what a layer's forward needs of the forward call it runs in.
type Pass struct {
	Pool *ops.Pool
	Sc   *ops.Scratch // matrix product buffers, reset by the caller between layers
	Pos  int          // position of the first token
	Ctx  int          // the sequence's context (0: unbounded)
}

// Forward runs the attention on the normed input x (n tokens of Embd),
// appending the tokens' keys and values to cache, and returns its output
// (n × Embd).
func (l *Layer) Forward(ps *Pass, p *Params, cache *state.HalfRows, x []float32, n int) ([]float32, error) {
	H, HKV, dk, dv := p.Heads, p.HeadsKV, p.KDim, p.VDim
	q, k, v, err := l.project(ps, p, x, n)
	if err != nil {
		return nil, err
	}
	ps.Pool.For(n, 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			qt, kt := q[t*H*dk:(t+1)*H*dk], k[t*HKV*dk:(t+1)*HKV*dk]
			if l.qNorm != nil {
				ops.RMSNorm(qt, qt, l.qNorm, dk, p.Eps)
			}
			if l.kNorm != nil {
				ops.RMSNorm(kt, kt, l.kNorm, dk, p.Eps)
			}
			p.Rope.Apply(qt, 1, H, dk, ps.Pos+t)
			p.Rope.Apply(kt, 1, HKV, dk, ps.Pos+t)
		}
	})
	stride := p.CacheStride()
	if cache.Stride != stride {
		return nil, fmt.Errorf("cache rows of %d values, the layer needs %d", cache.Stride, stride)
	}
	rows := cache.Grow(n)
	for t := 0; t < n; t++ {
		r := rows[t*stride : (t+1)*stride]
		ops.PutHalf(r[:HKV*dk], k[t*HKV*dk:(t+1)*HKV*dk])
		ops.PutHalf(r[HKV*dk:], v[t*HKV*dv:(t+1)*HKV*dv])
	}
	group := H / HKV
	att := ps.Sc.Floats(n * H * dv)
	ps.Pool.Attend(ops.Causal{N: n, Pos: ps.Pos, Heads: H, Scale: p.Scale, Ctx: ps.Ctx}, q, H*dk,
		func(h int) ops.HalfKV {
			g := h / group
			return ops.HalfKV{Stride: stride, KOff: g * dk, DK: dk, VOff: HKV*dk + g*dv, DV: dv}
		}, cache.Data, att, H*dv)
	out := ps.Sc.Floats(n * p.Embd)
	if err := ps.Pool.MatMul(l.Out.Matrix(), att, n, out); err != nil {
		return nil, fmt.Errorf("%s: %w", l.Out.Name, err)
	}
	return out, nil
}

// project returns the queries, keys and values of x (n rows each), biases
// added: three products in one batch, or one fused product split.
func (l *Layer) project(ps *Pass, p *Params, x []float32, n int) (q, k, v []float32, err error) {
	nq, nk, nv := p.Heads*p.KDim, p.HeadsKV*p.KDim, p.HeadsKV*p.VDim
	if l.QKV != nil {
		qkv := ps.Sc.Floats(n * (nq + nk + nv))
		if err := ps.Pool.MatMul(l.QKV.Matrix(), x, n, qkv); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", l.QKV.Name, err)
		}
		q, k, v = ps.Sc.Floats(n*nq), ps.Sc.Floats(n*nk), ps.Sc.Floats(n*nv)
		for t := 0; t < n; t++ {
			row := qkv[t*(nq+nk+nv) : (t+1)*(nq+nk+nv)]
			if l.qkvb != nil {
				ops.Add(row, l.qkvb)
			}
			copy(q[t*nq:], row[:nq])
			copy(k[t*nk:], row[nq:nq+nk])
			copy(v[t*nv:], row[nq+nk:])
		}
		return q, k, v, nil
	}
	q, k, v = ps.Sc.Floats(n*nq), ps.Sc.Floats(n*nk), ps.Sc.Floats(n*nv)
	err = ps.Pool.MatMuls(
		ops.MatMulOp{W: l.Q.Matrix(), X: x, N: n, Out: q},
		ops.MatMulOp{W: l.K.Matrix(), X: x, N: n, Out: k},
		ops.MatMulOp{W: l.V.Matrix(), X: x, N: n, Out: v})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s/%s/%s: %w", l.Q.Name, l.K.Name, l.V.Name, err)
	}
	for _, b := range []struct {
		out, bias []float32
		w         int
	}{{q, l.qb, nq}, {k, l.kb, nk}, {v, l.vb, nv}} {
		if b.bias != nil {
			for t := 0; t < n; t++ {
				ops.Add(b.out[t*b.w:(t+1)*b.w], b.bias)
			}
		}
	}
	return q, k, v, nil
}

// CheckMatrices reports a matrix without a dot product for its type.
func CheckMatrices(ts []*T) error {
	var errs []error
	for _, t := range ts {
		if t == nil {
			continue
		}
		if err := t.Matrix().Check(); err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}
