package kimik3

import (
	"errors"
	"math"

	"github.com/k3-inference/k3/core/ops"
)

// mla is a nope-only multi-head latent attention layer. Its memory is a
// cache of half rows (state.HalfRows): the latent when the queries are
// absorbed (attn_k_b/attn_v_b), every head's K and V with attn_kv_b.
type mla struct {
	QANorm  *T `gguf:"attn_q_a_norm,optional"`
	QA      *T `gguf:"attn_q_a,optional"`
	QB      *T `gguf:"attn_q_b,optional"`
	Q       *T `gguf:"attn_q,optional"` // the direct q projection, without q LoRA
	KVANorm *T `gguf:"attn_kv_a_norm"`
	KVA     *T `gguf:"attn_kv_a_mqa"`
	KVB     *T `gguf:"attn_kv_b,optional"`
	KB      *T `gguf:"attn_k_b,optional"`
	VB      *T `gguf:"attn_v_b,optional"`
	Gate    *T `gguf:"attn_gate,optional"`
	Out     *T `gguf:"attn_output"`

	qaNorm, kvaNorm []float32
}

func (l *mla) checks(p *Params, il int) ([]shapeCheck, error) {
	e, h := int64(p.Embd), int64(p.Heads)
	kd, vd, kv, rot := int64(p.kDim()), int64(p.vDim()), int64(p.KVLora), int64(p.Rot)
	nope := kd - rot
	var errs []error
	cs := []shapeCheck{{l.KVANorm, []int64{kv}}, {l.KVA, []int64{e, kv + rot}}, {l.Out, []int64{h * vd, e}}}
	if l.QANorm != nil {
		errs = append(errs, need(il, l, "QA", "QB"))
		cs = append(cs, shapeCheck{l.QANorm, []int64{int64(p.QLora)}}, shapeCheck{l.QA, []int64{e, int64(p.QLora)}},
			shapeCheck{l.QB, []int64{int64(p.QLora), h * kd}})
	} else {
		errs = append(errs, need(il, l, "Q"))
		cs = append(cs, shapeCheck{l.Q, []int64{e, h * kd}})
	}
	if l.KVB != nil {
		cs = append(cs, shapeCheck{l.KVB, []int64{kv, h * (nope + vd)}})
	} else {
		errs = append(errs, need(il, l, "KB", "VB"))
		cs = append(cs, shapeCheck{l.KB, []int64{nope, kv, h}}, shapeCheck{l.VB, []int64{kv, vd, h}})
	}
	if l.Gate != nil {
		cs = append(cs, shapeCheck{l.Gate, []int64{e, h * vd}})
	}
	return cs, errors.Join(errs...)
}

func (l *mla) prepare(fl func(*T) []float32) []*T {
	l.qaNorm, l.kvaNorm = fl(l.QANorm), fl(l.KVANorm)
	return []*T{l.Out, l.Q, l.QA, l.QB, l.KVA, l.KVB, l.KB, l.VB, l.Gate}
}

// forward runs the layer on the normed input x (n×Embd) with the cache of
// layer il. The latent (normed kv_cmpr plus the un-rotated pe part) is
// cached in half precision; with attn_k_b/attn_v_b the queries are
// absorbed into the latent space and the heads share one cached row,
// otherwise attn_kv_b expands every position into per-head K and V.
func (l *mla) forward(ps *pass, il int, x []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n
	kv, rot := p.KVLora, p.Rot

	// Every projection of the input in one batch; a nil tensor is skipped.
	proj, err := ps.matmuls(x, n, l.QA, l.Q, l.KVA, l.Gate)
	if err != nil {
		return nil, err
	}
	q, kvpe, gate := proj[1], proj[2], proj[3]
	if l.QA != nil {
		qa := proj[0]
		ops.RMSNorm(qa, qa, l.qaNorm, p.QLora, p.Eps)
		if q, err = ps.matmul(l.QB, qa, n); err != nil {
			return nil, err
		}
	}
	latent := ps.buf(n * kv)
	for t := 0; t < n; t++ {
		copy(latent[t*kv:(t+1)*kv], kvpe[t*(kv+rot):])
	}
	ops.RMSNorm(latent, latent, l.kvaNorm, kv, p.Eps)
	pe := func(t int) []float32 { return kvpe[t*(kv+rot)+kv : (t+1)*(kv+rot)] }

	var out []float32
	if l.KVB == nil {
		out, err = l.absorbed(ps, il, q, latent, pe)
	} else {
		out, err = l.expanded(ps, il, q, latent, pe)
	}
	if err != nil {
		return nil, err
	}
	if l.Gate != nil {
		for i := range out {
			out[i] *= ops.Sigmoid(gate[i])
		}
	}
	return ps.matmul(l.Out, out, n)
}

// attend runs causal attention for every (token, head) of the batch over
// the cache, with ggml's CPU flash-attention kernel for a batch this size.
func (ps *pass) attend(q []float32, qStride int, kvOf func(h int) ops.HalfKV, heads int, rows []uint16, out []float32, outStride int) {
	p, n := ps.m.p, ps.n
	scale := 1 / float32(math.Sqrt(float64(p.kDim())))
	// ggml's SIMD builds also require DV to be a multiple of their vector
	// width for the tiled kernel; the scalar build, which k3 follows, does not.
	tiled := n >= ops.FlashTileQ
	// llama.cpp's KV view covers max(256, used rounded up to 256) cells,
	// at most the context; one query over 512+ cells takes the split path.
	nkv := max(256, (ps.pos+n+255)/256*256)
	if ps.seq.Ctx > 0 {
		nkv = min(nkv, ps.seq.Ctx)
	}
	split := n == 1 && nkv >= 512
	ps.m.pool.For(n*heads, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t, h := i/heads, i%heads
			kvh := kvOf(h)
			kvh.Data = rows
			visible := ps.pos + t + 1
			qr := q[t*qStride+h*kvh.DK : t*qStride+(h+1)*kvh.DK]
			o := out[t*outStride+h*kvh.DV : t*outStride+(h+1)*kvh.DV]
			switch {
			case tiled:
				ops.AttendTiled(qr, kvh, visible, scale, o)
			case split:
				ops.AttendHalfSplit(qr, kvh, visible, nkv, ps.m.pool.Threads(), scale, o)
			default:
				ops.AttendHalf(qr, kvh, visible, scale, o)
			}
		}
	})
}

func (l *mla) absorbed(ps *pass, il int, q, latent []float32, pe func(int) []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n
	H, kd, vd, kv, rot := p.Heads, p.kDim(), p.vDim(), p.KVLora, p.Rot
	nope := kd - rot
	dk := kv + rot

	// absorb: per head, q_nope through attn_k_b into the latent space
	qa := ps.buf(n * H * dk)
	kb, vb := mat(l.KB), mat(l.VB)
	// Every head's product in one batch, each on its own buffers.
	qns, qhs := ps.buf(H*n*nope), ps.buf(H*n*kv)
	batch := make([]ops.MatMulOp, H)
	for h := 0; h < H; h++ {
		qn := qns[h*n*nope : (h+1)*n*nope]
		for t := 0; t < n; t++ {
			copy(qn[t*nope:(t+1)*nope], q[t*H*kd+h*kd:])
		}
		batch[h] = ops.MatMulOp{W: kb.Slice(h*kv, (h+1)*kv), X: qn, N: n, Out: qhs[h*n*kv : (h+1)*n*kv]}
	}
	if err := ps.m.pool.MatMuls(batch...); err != nil {
		return nil, err
	}
	for h := 0; h < H; h++ {
		qh := qhs[h*n*kv : (h+1)*n*kv]
		for t := 0; t < n; t++ {
			dst := qa[t*H*dk+h*dk:]
			copy(dst[:kv], qh[t*kv:(t+1)*kv])
			copy(dst[kv:dk], q[t*H*kd+h*kd+nope:t*H*kd+(h+1)*kd])
		}
	}

	att := ps.buf(n * H * kv)
	for _, sp := range ps.spans {
		cache := sp.seq.Cache[il]
		rows := cache.Grow(sp.n)
		for i := 0; i < sp.n; i++ {
			t := sp.off + i
			r := rows[i*dk : (i+1)*dk]
			ops.PutHalf(r[:kv], latent[t*kv:(t+1)*kv])
			ops.PutHalf(r[kv:], pe(t))
		}
		ps.spanPass(sp).attend(qa[sp.off*H*dk:], H*dk, func(int) ops.HalfKV {
			return ops.HalfKV{Stride: dk, KOff: 0, DK: dk, VOff: 0, DV: kv}
		}, H, cache.Data, att[sp.off*H*kv:], H*kv)
	}

	// decompress: per head, the latent output through attn_v_b
	out := ps.buf(n * H * vd)
	ahs, ohs := ps.buf(H*n*kv), ps.buf(H*n*vd)
	for h := 0; h < H; h++ {
		ah := ahs[h*n*kv : (h+1)*n*kv]
		for t := 0; t < n; t++ {
			copy(ah[t*kv:(t+1)*kv], att[t*H*kv+h*kv:])
		}
		batch[h] = ops.MatMulOp{W: vb.Slice(h*vd, (h+1)*vd), X: ah, N: n, Out: ohs[h*n*vd : (h+1)*n*vd]}
	}
	if err := ps.m.pool.MatMuls(batch...); err != nil {
		return nil, err
	}
	for h := 0; h < H; h++ {
		oh := ohs[h*n*vd : (h+1)*n*vd]
		for t := 0; t < n; t++ {
			copy(out[t*H*vd+h*vd:t*H*vd+(h+1)*vd], oh[t*vd:(t+1)*vd])
		}
	}
	return out, nil
}

// expanded is the attn_kv_b layout: K per head is [pe, k_nope] (the
// order llama.cpp concatenates them in) and V its own slice.
func (l *mla) expanded(ps *pass, il int, q, latent []float32, pe func(int) []float32) ([]float32, error) {
	p, n := ps.m.p, ps.n
	H, kd, vd, rot := p.Heads, p.kDim(), p.vDim(), p.Rot
	nope := kd - rot
	kvx, err := ps.matmul(l.KVB, latent, n)
	if err != nil {
		return nil, err
	}
	stride := H * (kd + vd)
	out := ps.buf(n * H * vd)
	for _, sp := range ps.spans {
		cache := sp.seq.Cache[il]
		rows := cache.Grow(sp.n)
		for i := 0; i < sp.n; i++ {
			t := sp.off + i
			r := rows[i*stride : (i+1)*stride]
			for h := 0; h < H; h++ {
				src := kvx[t*H*(nope+vd)+h*(nope+vd):]
				ops.PutHalf(r[h*kd:h*kd+rot], pe(t))
				ops.PutHalf(r[h*kd+rot:(h+1)*kd], src[:nope])
				ops.PutHalf(r[H*kd+h*vd:H*kd+(h+1)*vd], src[nope:nope+vd])
			}
		}
		ps.spanPass(sp).attend(q[sp.off*H*kd:], H*kd, func(h int) ops.HalfKV {
			return ops.HalfKV{Stride: stride, KOff: h * kd, DK: kd, VOff: H*kd + h*vd, DV: vd}
		}, H, cache.Data, out[sp.off*H*vd:], H*vd)
	}
	return out, nil
}
