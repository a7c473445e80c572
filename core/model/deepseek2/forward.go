package deepseek2

import (
	"fmt"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/mla"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

// pass is the working memory of one forward call over n tokens.
type pass struct {
	m   *Model
	seq *state.Sequence
	n   int
	pos int // position of the first token
	// sc holds the inputs and outputs of a layer's matrix products; it is
	// reset at the start of every layer.
	sc *ops.Scratch
}

// Forward implements model.Model.
func (m *Model) Forward(s model.State, tokens []int32, all bool, logits []float32) error {
	seq, ok := s.(*state.Sequence)
	if !ok || len(seq.Cache) != m.p.Layers {
		return fmt.Errorf("deepseek2: state %T is not a deepseek2 sequence", s)
	}
	n := len(tokens)
	if n == 0 {
		return nil
	}
	rows := 1
	if all {
		rows = n
	}
	if len(logits) < rows*m.vocab {
		return fmt.Errorf("deepseek2: logits buffer of %d for %d rows of %d", len(logits), rows, m.vocab)
	}
	ps := &pass{m: m, seq: seq, n: n, pos: seq.N, sc: m.pool.Backend().Scratch()}
	defer ps.sc.Close()
	x, err := model.Embed(m.top.Embd, tokens)
	if err != nil {
		return fmt.Errorf("deepseek2: %w", err)
	}
	for il := range m.layers {
		if x, err = ps.layer(il, x); err != nil {
			return fmt.Errorf("deepseek2: layer %d: %w", il, err)
		}
		for ahead := 1; ahead <= m.experts.Lookahead(); ahead++ {
			if err := ps.predict(il+ahead, x); err != nil {
				return fmt.Errorf("deepseek2: layer %d: lookahead: %w", il+ahead, err)
			}
		}
	}
	seq.N += n
	E := m.p.Embd
	if !all {
		x = x[(n-1)*E : n*E]
	}
	ops.RMSNorm(x, x, m.top.outNorm, E, m.p.Eps)
	return m.pool.MatMul(m.top.Output.Matrix(), x, rows, logits)
}

// layer runs block il on the residual stream x (n×Embd) and returns the next.
func (ps *pass) layer(il int, x []float32) ([]float32, error) {
	p, l := ps.m.p, &ps.m.layers[il]
	E := p.Embd
	ps.sc.Reset()
	w := model.Work{Pool: ps.m.pool, Sc: ps.sc}

	normed := w.Buf(len(x))
	ops.RMSNorm(normed, x, l.attnNorm, E, p.Eps)
	attn, err := l.attn.Forward(&p.MLA, &mla.Pass{Work: w, N: ps.n, Pos: ps.pos, Ctx: ps.seq.Ctx, Cache: ps.seq.Cache[il]}, normed)
	if err != nil {
		return nil, err
	}
	h := add(attn, x) // ffn_inp = cur + inpSA
	normed = w.Buf(len(h))
	ops.RMSNorm(normed, h, l.ffnNorm, E, p.Eps)
	out, err := l.ffn.forward(ps, normed)
	if err != nil {
		return nil, err
	}
	return add(out, h), nil
}

func add(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range out {
		out[i] = a[i] + b[i]
	}
	return out
}

// predict guesses layer il's experts before its input exists: layer il-1's
// output x, normed as il's router input would be, through il's router. The
// guess goes to the stager as a speculative hint, so the reads overlap
// il's attention. Dense layers and layers past the last have nothing to
// guess.
func (ps *pass) predict(il int, x []float32) error {
	if il >= len(ps.m.layers) {
		return nil
	}
	l := &ps.m.layers[il]
	f, ok := l.ffn.(*sparse)
	if !ok {
		return nil
	}
	normed := make([]float32, len(x))
	ops.RMSNorm(normed, x, l.ffnNorm, ps.m.p.Embd, ps.m.p.Eps)
	return ps.m.experts.Predict(&f.routed, normed, ps.n, ps.sc)
}
