package mla

import (
	"github.com/k3-inference/k3/core/ops"
)

// Forward runs the layer on the normed input x (N×Embd) and returns its
// output (N×Embd). The latent (normed kv_cmpr plus the pe part) is cached
// in half precision; with attn_k_b/attn_v_b the queries are absorbed into
// the latent space and the heads share one cached row, otherwise attn_kv_b
// expands every position into per-head K and V.
func (l *Layer) Forward(s *Shape, ps *Pass, x []float32) ([]float32, error) {
	n := ps.N
	kv, rot := s.KVLora, s.Rot

	// Every projection of the input in one batch; a nil tensor is skipped.
	proj, err := ps.MatMuls(x, n, l.QA, l.Q, l.KVA, l.Gate)
	if err != nil {
		return nil, err
	}
	q, kvpe, gate := proj[1], proj[2], proj[3]
	if l.QA != nil {
		qa := proj[0]
		ops.RMSNorm(qa, qa, l.qaNorm, s.QLora, s.Eps)
		if q, err = ps.MatMul(l.QB, qa, n); err != nil {
			return nil, err
		}
	}
	if s.Rope != nil {
		s.rope(ps, q, kvpe)
	}
	latent := ps.Buf(n * kv)
	for t := 0; t < n; t++ {
		copy(latent[t*kv:(t+1)*kv], kvpe[t*(kv+rot):])
	}
	ops.RMSNorm(latent, latent, l.kvaNorm, kv, s.Eps)
	pe := func(t int) []float32 { return kvpe[t*(kv+rot)+kv : (t+1)*(kv+rot)] }

	var out []float32
	if l.KVB == nil {
		out, err = l.absorbed(s, ps, q, latent, pe)
	} else {
		out, err = l.expanded(s, ps, q, latent, pe)
	}
	if err != nil {
		return nil, err
	}
	if l.Gate != nil {
		for i := range out {
			out[i] *= ops.Sigmoid(gate[i])
		}
	}
	return ps.MatMul(l.Out, out, n)
}

// rope rotates, for every token, each head's query pe part (the last Rot
// values of its KDim) and the key pe part after the latent.
func (s *Shape) rope(ps *Pass, q, kvpe []float32) {
	H, kd, kv, rot := s.Heads, s.KDim, s.KVLora, s.Rot
	pos := make([]int, ps.N) // each row's position in its sequence
	for _, sp := range ps.spans() {
		for i := range sp.N {
			pos[sp.Off+i] = sp.Pos + i
		}
	}
	ps.Pool.For(ps.N, 1, func(lo, hi int) {
		cache := make([]float32, rot)
		for t := lo; t < hi; t++ {
			s.Rope.Cache(pos[t], cache)
			for h := 0; h < H; h++ {
				off := t*H*kd + h*kd + kd - rot
				s.Rope.Rotate(q[off:off+rot], cache)
			}
			s.Rope.Rotate(kvpe[t*(kv+rot)+kv:(t+1)*(kv+rot)], cache)
		}
	})
}

// attend runs causal attention for every (token, head) of a span over its
// cache, with the kernel ggml's CPU flash attention takes for a batch this
// size (ops.Pool.Attend, shared with GQA models); q and out start at the
// span's first row.
func (s *Shape) attend(ps *Pass, sp Span, q []float32, qStride int, kvOf func(h int) ops.HalfKV, heads int, out []float32, outStride int) {
	c := ops.Causal{N: sp.N, Pos: sp.Pos, Heads: heads, Scale: s.Scale, Ctx: sp.Ctx}
	ps.Pool.Attend(c, q, qStride, kvOf, sp.Cache.Data, out, outStride)
}

func (l *Layer) absorbed(s *Shape, ps *Pass, q, latent []float32, pe func(int) []float32) ([]float32, error) {
	n := ps.N
	H, kd, vd, kv, rot := s.Heads, s.KDim, s.VDim, s.KVLora, s.Rot
	nope := kd - rot
	dk := kv + rot

	// absorb: per head, q_nope through attn_k_b into the latent space
	qa := ps.Buf(n * H * dk)
	kb, vb := l.KB.Matrix(), l.VB.Matrix()
	// Every head's product in one batch, each on its own buffers.
	qns, qhs := ps.Buf(H*n*nope), ps.Buf(H*n*kv)
	batch := make([]ops.MatMulOp, H)
	for h := 0; h < H; h++ {
		qn := qns[h*n*nope : (h+1)*n*nope]
		for t := 0; t < n; t++ {
			copy(qn[t*nope:(t+1)*nope], q[t*H*kd+h*kd:])
		}
		batch[h] = ops.MatMulOp{W: kb.Slice(h*kv, (h+1)*kv), X: qn, N: n, Out: qhs[h*n*kv : (h+1)*n*kv]}
	}
	if err := ps.Pool.MatMuls(batch...); err != nil {
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

	att := ps.Buf(n * H * kv)
	for _, sp := range ps.spans() {
		rows := sp.Cache.Grow(sp.N)
		for i := range sp.N {
			t := sp.Off + i
			r := rows[i*dk : (i+1)*dk]
			ops.PutHalf(r[:kv], latent[t*kv:(t+1)*kv])
			ops.PutHalf(r[kv:], pe(t))
		}
		s.attend(ps, sp, qa[sp.Off*H*dk:], H*dk, func(int) ops.HalfKV {
			return ops.HalfKV{Stride: dk, KOff: 0, DK: dk, VOff: 0, DV: kv}
		}, H, att[sp.Off*H*kv:], H*kv)
	}

	// decompress: per head, the latent output through attn_v_b
	out := ps.Buf(n * H * vd)
	ahs, ohs := ps.Buf(H*n*kv), ps.Buf(H*n*vd)
	for h := 0; h < H; h++ {
		ah := ahs[h*n*kv : (h+1)*n*kv]
		for t := 0; t < n; t++ {
			copy(ah[t*kv:(t+1)*kv], att[t*H*kv+h*kv:])
		}
		batch[h] = ops.MatMulOp{W: vb.Slice(h*vd, (h+1)*vd), X: ah, N: n, Out: ohs[h*n*vd : (h+1)*n*vd]}
	}
	if err := ps.Pool.MatMuls(batch...); err != nil {
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

// expanded is the attn_kv_b layout: K per head is the pe part and k_nope
// in the architecture's order (Shape.PeFirst), V its own slice.
func (l *Layer) expanded(s *Shape, ps *Pass, q, latent []float32, pe func(int) []float32) ([]float32, error) {
	n := ps.N
	H, kd, vd, rot := s.Heads, s.KDim, s.VDim, s.Rot
	nope := kd - rot
	kvx, err := ps.MatMul(l.KVB, latent, n)
	if err != nil {
		return nil, err
	}
	peOff, nopeOff := 0, rot
	if !s.PeFirst {
		peOff, nopeOff = nope, 0
	}
	stride := H * (kd + vd)
	out := ps.Buf(n * H * vd)
	for _, sp := range ps.spans() {
		rows := sp.Cache.Grow(sp.N)
		for i := range sp.N {
			t := sp.Off + i
			r := rows[i*stride : (i+1)*stride]
			for h := 0; h < H; h++ {
				src := kvx[t*H*(nope+vd)+h*(nope+vd):]
				ops.PutHalf(r[h*kd+peOff:h*kd+peOff+rot], pe(t))
				ops.PutHalf(r[h*kd+nopeOff:h*kd+nopeOff+nope], src[:nope])
				ops.PutHalf(r[H*kd+h*vd:H*kd+(h+1)*vd], src[nope:nope+vd])
			}
		}
		s.attend(ps, sp, q[sp.Off*H*kd:], H*kd, func(h int) ops.HalfKV {
			return ops.HalfKV{Stride: stride, KOff: h * kd, DK: kd, VOff: H*kd + h*vd, DV: vd}
		}, H, out[sp.Off*H*vd:], H*vd)
	}
	return out, nil
}
