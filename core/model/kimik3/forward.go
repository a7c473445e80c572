package kimik3

import (
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

// pass is the working memory of one forward call over n tokens.
type pass struct {
	m   *Model
	seq *state.Sequence
	n   int
	pos int // position of the first token
	// stack holds the banked layer inputs of the attention residuals.
	stack [][]float32
	// sc holds the inputs and outputs of a layer's matrix products where
	// the backend computes without copies (a kernels plugin's arena); it is
	// reset at the start of every layer, so nothing in it outlives one.
	sc *ops.Scratch
}

// Forward implements model.Model.
func (m *Model) Forward(s model.State, tokens []int32, all bool, logits []float32) error {
	seq, ok := s.(*state.Sequence)
	if !ok || len(seq.Cache) != m.p.Layers {
		return fmt.Errorf("kimi-k3: state %T is not a kimi-k3 sequence", s)
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
		return fmt.Errorf("kimi-k3: logits buffer of %d for %d rows of %d", len(logits), rows, m.vocab)
	}
	ps := &pass{m: m, seq: seq, n: n, pos: seq.N, sc: m.pool.Backend().Scratch()}
	defer ps.sc.Close()
	x, err := m.embed(tokens)
	if err != nil {
		return err
	}
	for il := range m.layers {
		if x, err = ps.layer(il, x); err != nil {
			return fmt.Errorf("kimi-k3: layer %d: %w", il, err)
		}
		for ahead := 1; ahead <= m.experts.Lookahead(); ahead++ {
			if !m.lookahead(il + ahead) {
				continue
			}
			if err := ps.predict(il+ahead, x); err != nil {
				return fmt.Errorf("kimi-k3: layer %d: lookahead: %w", il+ahead, err)
			}
		}
	}
	seq.N += n
	E := m.p.Embd
	if m.p.ResBlock > 0 {
		x = ps.resMix(x, m.top.outScore)
	}
	if !all {
		x = x[(n-1)*E : n*E]
	}
	ops.RMSNorm(x, x, m.top.outNorm, E, m.p.Eps)
	return m.pool.MatMul(mat(m.top.Output), x, rows, logits)
}

func (m *Model) embed(tokens []int32) ([]float32, error) {
	x, err := model.Embed(m.top.Embd, tokens)
	if err != nil {
		return nil, fmt.Errorf("kimi-k3: %w", err)
	}
	return x, nil
}

// layer runs block il on the residual stream x (n×Embd) and returns the next.
func (ps *pass) layer(il int, x []float32) ([]float32, error) {
	p, l := ps.m.p, &ps.m.layers[il]
	E := p.Embd
	useRes := p.ResBlock > 0
	ps.sc.Reset()

	prefix := x
	cur := prefix
	if useRes {
		cur = ps.resMix(prefix, l.attnScore)
	}
	banked := useRes && il%p.ResBlock == 0
	if banked {
		ps.stack = append(ps.stack, prefix) // the raw layer input
	}
	normed := ps.buf(len(cur))
	ops.RMSNorm(normed, cur, l.attnNorm, E, p.Eps)

	attn, err := l.attn.forward(ps, il, normed)
	if err != nil {
		return nil, err
	}
	if banked {
		prefix = attn // the stream restarts from the attention output
	} else {
		prefix = add(prefix, attn)
	}
	cur = prefix
	if useRes {
		cur = ps.resMix(prefix, l.ffnScore)
	}
	normed = ps.buf(len(cur))
	ops.RMSNorm(normed, cur, l.ffnNorm, E, p.Eps)
	ffn, err := l.ffn.forward(ps, normed)
	if err != nil {
		return nil, err
	}
	return add(prefix, ffn), nil
}

func add(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range out {
		out[i] = a[i] + b[i]
	}
	return out
}

// resMix is the attention-residual mix: a softmax over the banked inputs
// and the current stream, scored by score·rmsnorm(value), applied to the
// raw values. With nothing banked it is the identity.
func (ps *pass) resMix(cur, score []float32) []float32 {
	if len(ps.stack) == 0 {
		return cur
	}
	E, eps := ps.m.p.Embd, ps.m.p.Eps
	nc := len(ps.stack)
	out := make([]float32, len(cur))
	ps.m.pool.For(ps.n, 1, func(lo, hi int) {
		sc := make([]float32, nc+1)
		tmp := make([]float32, E)
		for t := lo; t < hi; t++ {
			for c := 0; c <= nc; c++ {
				src := cur
				if c < nc {
					src = ps.stack[c]
				}
				ops.RMSNorm(tmp, src[t*E:(t+1)*E], nil, E, eps)
				var s float64
				for e, v := range tmp {
					s += float64(v * score[e])
				}
				sc[c] = float32(s)
			}
			ops.Softmax(sc, sc)
			o := out[t*E : (t+1)*E]
			pc := sc[nc]
			for e := range o {
				var s float32
				for c := 0; c < nc; c++ {
					s += ps.stack[c][t*E+e] * sc[c]
				}
				o[e] = s + cur[t*E+e]*pc
			}
		}
	})
	return out
}

// work is the pass's matrix products, on the layer's scratch.
func (ps *pass) work() model.Work { return model.Work{Pool: ps.m.pool, Sc: ps.sc} }

func (ps *pass) matmul(t *T, x []float32, rows int) ([]float32, error) {
	return ps.work().MatMul(t, x, rows)
}

// matmuls multiplies x by each of ts in one batch (one round trip to a
// kernels plugin); a nil tensor gives a nil output.
func (ps *pass) matmuls(x []float32, rows int, ts ...*T) ([][]float32, error) {
	return ps.work().MatMuls(x, rows, ts...)
}

// buf is working memory that lives until the next layer starts.
func (ps *pass) buf(n int) []float32 { return ps.sc.Floats(n) }

var negInf = float32(math.Inf(-1))
