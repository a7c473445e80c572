// Package mla is multi-head latent attention as llama.cpp builds it for
// deepseek2 and kimi-k3: queries directly or through a LoRA, a compressed
// key/value latent plus a shared positional ("pe") part, cached in half
// precision, in the absorbed layout (attn_k_b/attn_v_b: the heads share
// one cached latent row) or the expanded one (attn_kv_b: every head's K
// and V cached). Architectures bind a Layer per attention block and run it
// with their Shape.
package mla

import (
	"errors"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

type T = model.Tensor

// Shape is what an architecture's hyperparameters make of an MLA layer.
type Shape struct {
	Embd, Heads int
	KDim, VDim  int // per-head key and value widths (n_embd_head_k_mla / _v_mla)
	KVLora      int // kv_lora_rank: the cached latent
	QLora       int // q_lora_rank (0: direct attn_q)
	Rot         int // rope.dimension_count: the pe part of keys and queries
	Eps         float32
	// Scale multiplies the attention scores (kq_scale).
	Scale float32
	// Rope rotates the pe parts (nil: they are used as they are, as in
	// Kimi K3's nope-only MLA).
	Rope *ops.Rope
	// PeFirst orders an expanded key per head as [pe, k_nope] (Kimi K3's
	// concatenation); otherwise [k_nope, pe] (deepseek2's).
	PeFirst bool
}

// CacheStride is the half values cached per position: the normed latent
// and the pe part when absorbed, else every head's K and V.
func (s *Shape) CacheStride(expanded bool) int {
	if !expanded {
		return s.KVLora + s.Rot
	}
	return s.Heads * (s.KDim + s.VDim)
}

// Layer is one MLA block's tensors, bound under its blk.N. prefix.
type Layer struct {
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

// Expanded reports whether the layer has the attn_kv_b layout.
func (l *Layer) Expanded() bool { return l.KVB != nil }

// Checks are the shapes llama.cpp's loader requires of the layer's
// tensors, and an error naming required tensors that are missing.
func (l *Layer) Checks(s *Shape, il int) ([]model.ShapeCheck, error) {
	e, h := int64(s.Embd), int64(s.Heads)
	kd, vd, kv, rot := int64(s.KDim), int64(s.VDim), int64(s.KVLora), int64(s.Rot)
	nope := kd - rot
	var errs []error
	chk := func(t *T, shape ...int64) model.ShapeCheck { return model.ShapeCheck{T: t, Shape: shape} }
	cs := []model.ShapeCheck{chk(l.KVANorm, kv), chk(l.KVA, e, kv+rot), chk(l.Out, h*vd, e)}
	if l.QANorm != nil {
		errs = append(errs, model.Need(il, l, "QA", "QB"))
		q := int64(s.QLora)
		cs = append(cs, chk(l.QANorm, q), chk(l.QA, e, q), chk(l.QB, q, h*kd))
	} else {
		errs = append(errs, model.Need(il, l, "Q"))
		cs = append(cs, chk(l.Q, e, h*kd))
	}
	if l.KVB != nil {
		cs = append(cs, chk(l.KVB, kv, h*(nope+vd)))
	} else {
		errs = append(errs, model.Need(il, l, "KB", "VB"))
		cs = append(cs, chk(l.KB, nope, kv, h), chk(l.VB, kv, vd, h))
	}
	if l.Gate != nil {
		cs = append(cs, chk(l.Gate, e, h*vd))
	}
	return cs, errors.Join(errs...)
}

// Prepare makes the float views of the norms (fl views or dequantizes a
// tensor) and returns the matrices, which need a dot product.
func (l *Layer) Prepare(fl func(*T) []float32) []*T {
	l.qaNorm, l.kvaNorm = fl(l.QANorm), fl(l.KVANorm)
	return []*T{l.Out, l.Q, l.QA, l.QB, l.KVA, l.KVB, l.KB, l.VB, l.Gate}
}

// Pass is what one forward call gives a layer: its matrix products, the
// batch (N tokens from position Pos), the sequence's context size (0:
// unbounded) and the layer's cache.
type Pass struct {
	model.Work
	N, Pos int
	Ctx    int
	Cache  *state.HalfRows
	// Spans, when set, split the batch among several sequences (a model's
	// ForwardBatch): each span's tokens are at its own positions, in its
	// own cache, and attend only to it. Pos, Ctx and Cache are then unused.
	Spans []Span
}

// Span is one sequence's rows of a batch that holds several.
type Span struct {
	Off, N int // rows Off..Off+N-1 of the batch
	Pos    int // position of its first row
	Ctx    int
	Cache  *state.HalfRows
}

// spans returns the pass's sequences: its Spans, or one covering the batch.
func (ps *Pass) spans() []Span {
	if ps.Spans != nil {
		return ps.Spans
	}
	return []Span{{N: ps.N, Pos: ps.Pos, Ctx: ps.Ctx, Cache: ps.Cache}}
}
