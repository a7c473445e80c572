package kimik3

import (
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

// pass is the working memory of one forward call over n tokens: those of
// one sequence (Forward) or the tokens of several (ForwardBatch).
// Matrix products and the expert runner see all n rows at once; the
// attention and recurrent layers run each span on its own sequence.
type pass struct {
	m     *Model
	spans []span
	n     int
	// seq and pos are the sequence and the position of the first token of
	// the span a per-sequence step runs on (spanPass).
	seq *state.Sequence
	pos int
	// stack holds the banked layer inputs of the attention residuals.
	stack [][]float32
	// sc holds the inputs and outputs of a layer's matrix products where
	// the backend computes without copies (a kernels plugin's arena); it is
	// reset at the start of every layer, so nothing in it outlives one.
	sc *ops.Scratch
	// logits, in and outs are the router logits, the routed experts'
	// input and their per-slot outputs of a call run in ranges
	// (layerRanges), reused from layer to layer.
	logits, in, outs []float32
}

// span is the rows of a pass that belong to one sequence.
type span struct {
	seq    *state.Sequence
	pos    int // the sequence's position before the pass
	off, n int // rows off..off+n of the pass
}

// spanPass is ps narrowed to one span, for the steps that read or write a
// sequence's memory; its n rows are the span's.
func (ps *pass) spanPass(sp span) *pass {
	sub := *ps
	sub.seq, sub.pos, sub.n = sp.seq, sp.pos, sp.n
	return &sub
}

func (m *Model) sequence(s model.State) (*state.Sequence, error) {
	seq, ok := s.(*state.Sequence)
	if !ok || len(seq.Cache) != m.p.Layers {
		return nil, fmt.Errorf("kimi-k3: state %T is not a kimi-k3 sequence", s)
	}
	return seq, nil
}

// Forward implements model.Model.
func (m *Model) Forward(s model.State, tokens []int32, all bool, logits []float32) error {
	seq, err := m.sequence(s)
	if err != nil {
		return err
	}
	n := len(tokens)
	if n == 0 {
		return nil
	}
	out := lastRow
	if all {
		out = everyRow
	}
	return m.forward([]span{{seq: seq, pos: seq.N, n: n}}, tokens, out, logits)
}

// ForwardBatch implements model.Batcher: the tokens of several sequences
// in one pass, so each weight (and each routed expert any of them picks)
// is read once for all; the logits are those of each sequence's last
// token.
func (m *Model) ForwardBatch(states []model.State, tokens [][]int32, logits []float32) error {
	if len(states) != len(tokens) {
		return fmt.Errorf("kimi-k3: %d states for %d token runs", len(states), len(tokens))
	}
	spans := make([]span, len(states))
	var flat []int32
	for i, s := range states {
		seq, err := m.sequence(s)
		if err != nil {
			return err
		}
		if len(tokens[i]) == 0 {
			return fmt.Errorf("kimi-k3: sequence %d of the batch has no tokens", i)
		}
		for _, o := range spans[:i] {
			if o.seq == seq {
				return fmt.Errorf("kimi-k3: sequence %d appears twice in a batch", i)
			}
		}
		spans[i] = span{seq: seq, pos: seq.N, off: len(flat), n: len(tokens[i])}
		flat = append(flat, tokens[i]...)
	}
	if len(spans) == 0 {
		return nil
	}
	return m.forward(spans, flat, lastOfEach, logits)
}

// Which rows of a pass get logits.
const (
	lastRow    = iota // the pass's last row (Forward)
	everyRow          // every row (Forward with all)
	lastOfEach        // each span's last row (ForwardBatch)
)

// forward runs the tokens of spans (in row order) through the model and
// writes the logits of the rows out selects.
func (m *Model) forward(spans []span, tokens []int32, out int, logits []float32) error {
	n := len(tokens)
	rows := 1
	switch out {
	case everyRow:
		rows = n
	case lastOfEach:
		rows = len(spans)
	}
	if len(logits) < rows*m.vocab {
		return fmt.Errorf("kimi-k3: logits buffer of %d for %d rows of %d", len(logits), rows, m.vocab)
	}
	ps := &pass{m: m, spans: spans, n: n, sc: m.pool.Backend().Scratch()}
	defer ps.sc.Close()
	x, err := m.embed(tokens)
	if err != nil {
		return err
	}
	rs := ps.ranges()
	for il := range m.layers {
		if len(rs) > 1 {
			x, err = ps.layerRanges(il, x, rs)
		} else {
			x, err = ps.layer(il, x)
		}
		if err != nil {
			return fmt.Errorf("kimi-k3: layer %d: %w", il, err)
		}
		for ahead := 1; ahead <= m.experts.Lookahead(); ahead++ {
			if !m.lookahead(il + ahead) {
				continue
			}
			if len(rs) > 1 {
				err = ps.predictRanges(il+ahead, x, rs)
			} else {
				err = ps.predict(il+ahead, x)
			}
			if err != nil {
				return fmt.Errorf("kimi-k3: layer %d: lookahead: %w", il+ahead, err)
			}
		}
	}
	for _, sp := range spans {
		sp.seq.N += sp.n
	}
	E := m.p.Embd
	ps.logits, ps.in, ps.outs = nil, nil, nil
	fin := ps
	if out == lastRow && len(rs) > 1 {
		// Only the last row's logits: mix only its stream.
		fin = ps.rows(subRange{n - 1, n})
		x = x[(n-1)*E:]
	}
	if m.p.ResBlock > 0 {
		x = fin.resMix(x, m.top.outScore)
	}
	switch out {
	case lastRow:
		x = x[len(x)-E:]
	case lastOfEach:
		if rows < n {
			picked := make([]float32, rows*E)
			for i, sp := range spans {
				copy(picked[i*E:(i+1)*E], x[(sp.off+sp.n-1)*E:(sp.off+sp.n)*E])
			}
			x = picked
		}
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
