package kimik3

import (
	"errors"
	"fmt"
	"github.com/k3-inference/k3/core/moe"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
)

// predict guesses layer il's experts before its input exists: layer il-1's
// output x, mixed with the banked layer inputs and normed as il's router
// input would be, through il's router. The guess goes to the stager as a
// speculative hint, so the reads overlap il's attention. The attention
// residuals matter: the router reads the mix of the stream and the banks
// (the embedding first of all), not the stream alone; a layer that banks x
// itself is guessed from the banks it starts with.
func (ps *pass) predict(il int, x []float32) error {
	p, l := ps.m.p, &ps.m.layers[il]
	cur := x
	if p.ResBlock > 0 {
		cur = ps.resMix(x, l.ffnScore)
	}
	normed := make([]float32, len(x))
	ops.RMSNorm(normed, cur, l.ffnNorm, p.Embd, p.Eps)
	return ps.m.experts.Predict(&l.ffn.(*sparse).routed, normed, ps.n, ps.sc)
}

// lookahead reports whether layer il's experts should be predicted.
func (m *Model) lookahead(il int) bool {
	if m.experts.Lookahead() == 0 || il >= m.p.Layers {
		return false
	}
	_, routed := m.layers[il].ffn.(*sparse)
	return routed
}

// useStager makes the model re-read every tensor when a stager serving
// its routed experts moves them.
func (m *Model) useStager(w model.Weights) {
	if src := m.experts.Source; src != nil {
		src.OnRemap(func() error { return m.rebind(w) })
	}
}

// rebind points every tensor at w's current bytes and rebuilds the float
// views. It runs between stager calls of a forward pass, when no view of
// the old bytes is in use.
func (m *Model) rebind(w model.Weights) error {
	errs := []error{model.Bind(w, "", &m.top)}
	for il := range m.layers {
		errs = append(errs, m.layers[il].bind(w, il))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kimi-k3: rebind: %w", err)
	}
	return m.prepare()
}

// Experts is the runner of the model's routed experts (tools set its
// Trace to measure the routing).
func (m *Model) Experts() *moe.Runner { return m.experts }
