package qwen3moe

import (
	"fmt"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/gqa"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/core/state"
)

// Forward implements model.Model.
func (m *Model) Forward(s model.State, tokens []int32, all bool, logits []float32) error {
	seq, ok := s.(*state.Sequence)
	if !ok || len(seq.Cache) != m.p.Layers {
		return fmt.Errorf("%s: state %T is not a %s sequence", Arch, s, Arch)
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
		return fmt.Errorf("%s: logits buffer of %d for %d rows of %d", Arch, len(logits), rows, m.vocab)
	}
	x, err := m.embed(tokens)
	if err != nil {
		return err
	}
	sc := m.pool.Backend().Scratch()
	defer sc.Close()
	ps := &gqa.Pass{Pool: m.pool, Sc: sc, Pos: seq.N, Ctx: seq.Ctx}
	for il := range m.layers {
		if x, err = m.layer(ps, seq.Cache[il], il, x, n, all); err != nil {
			return fmt.Errorf("%s: layer %d: %w", Arch, il, err)
		}
		for ahead := 1; ahead <= m.experts.Lookahead() && il+ahead < m.p.Layers; ahead++ {
			if err := m.predict(il+ahead, x, sc); err != nil {
				return fmt.Errorf("%s: layer %d: lookahead: %w", Arch, il+ahead, err)
			}
		}
	}
	seq.N += n
	E := m.p.Attn.Embd
	ops.RMSNorm(x, x, m.top.outNorm, E, m.p.Attn.Eps)
	return m.pool.MatMul(m.output().Matrix(), x, rows, logits)
}

// layer runs block il on the residual stream x (n × Embd) and returns
// the next. In the last block without all, only the last token goes on
// past the attention (llama.cpp's inp_out_ids), so the FFN routes and
// reads the experts of that token alone; the result is then one row.
func (m *Model) layer(ps *gqa.Pass, cache *state.HalfRows, il int, x []float32, n int, all bool) ([]float32, error) {
	p, l := m.p, &m.layers[il]
	E := p.Attn.Embd
	ps.Sc.Reset()
	normed := ps.Sc.Floats(n * E)
	ops.RMSNorm(normed, x, l.attnNorm, E, p.Attn.Eps)
	attn, err := l.attn.Forward(ps, &p.Attn, cache, normed, n)
	if err != nil {
		return nil, err
	}
	if il == p.Layers-1 && !all {
		x, attn, n = x[(n-1)*E:], attn[(n-1)*E:], 1
	}
	h := make([]float32, n*E)
	for i := range h {
		h[i] = attn[i] + x[i]
	}
	normed = ps.Sc.Floats(n * E)
	ops.RMSNorm(normed, h, l.ffnNorm, E, p.Attn.Eps)
	out, err := m.experts.FFN(&l.routed, normed, n, ps.Sc)
	if err != nil {
		return nil, err
	}
	ops.Add(out, h)
	return out, nil
}

// predict guesses layer il's experts before its input exists: the
// previous layer's output x, normed as il's router input would be, through
// il's router. The guess goes to the stager as a speculative hint, so
// the reads overlap il's attention.
func (m *Model) predict(il int, x []float32, sc *ops.Scratch) error {
	p, l := m.p, &m.layers[il]
	normed := make([]float32, len(x))
	ops.RMSNorm(normed, x, l.ffnNorm, p.Attn.Embd, p.Attn.Eps)
	return m.experts.Predict(&l.routed, normed, len(x)/p.Attn.Embd, sc)
}

func (m *Model) embed(tokens []int32) ([]float32, error) {
	E := m.p.Attn.Embd
	t := m.top.Embd
	rb, err := quant.RowSize(t.Type, int64(E))
	if err != nil {
		return nil, err
	}
	x := make([]float32, len(tokens)*E)
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= m.vocab {
			return nil, fmt.Errorf("%s: token %d out of range [0, %d)", Arch, tok, m.vocab)
		}
		row := t.Data[int64(tok)*rb : int64(tok+1)*rb]
		if err := quant.Dequantize(t.Type, row, x[i*E:(i+1)*E]); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", Arch, t.Name, err)
		}
	}
	return x, nil
}
