package kimik3

import (
	"errors"
	"fmt"
	"slices"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
)

// expertMats are the weights of the experts a layer's batch chose (in the
// order of Batch.Experts): views of the mapped file, or, for experts
// [base, base+n), slices a stager acquired for this step.
type expertMats struct {
	l       *layer
	experts []int32
	base    int
	fe, lat int
	set     *engine.ExpertSet // nil: views of the file
}

// expertMats gets the weights of experts [lo, hi) of layer il. With
// staged weights they are acquired (and pinned until release).
func (m *Model) expertMats(il int, l *layer, experts []int32, lo, hi int) (*expertMats, error) {
	ex := &expertMats{l: l, experts: experts, base: lo, fe: m.p.FFExp, lat: m.p.latent()}
	if m.experts == nil {
		return ex, nil
	}
	set, err := m.experts.AcquireExperts(il, []string{l.GateExps.Name, l.UpExps.Name, l.DownExps.Name}, experts[lo:hi])
	if err != nil {
		return nil, err
	}
	ex.set = set
	return ex, nil
}

// mats are gate, up and down of the i-th chosen expert.
func (ex *expertMats) mats(i int) (gate, up, down ops.Matrix) {
	l, fe, lat := ex.l, ex.fe, ex.lat
	if ex.set == nil {
		e := int(ex.experts[i])
		return mat(l.GateExps).Slice(e*fe, (e+1)*fe), mat(l.UpExps).Slice(e*fe, (e+1)*fe), mat(l.DownExps).Slice(e*lat, (e+1)*lat)
	}
	part := func(t *T, j, rows int) ops.Matrix {
		return ops.Matrix{Type: t.Type, Rows: rows, Cols: int(t.Shape[0]), Data: ex.set.Bytes(j, i-ex.base), Transient: true}
	}
	return part(l.GateExps, 0, fe), part(l.UpExps, 1, fe), part(l.DownExps, 2, lat)
}

func (ex *expertMats) release() error {
	if ex.set == nil {
		return nil
	}
	return ex.set.Release()
}

// predict guesses layer il's experts before its input exists: layer il-1's
// output x, normed as il's router input would be, through il's router.
// The guess goes to the stager as a speculative hint, so the reads overlap
// il's attention.
func (ps *pass) predict(il int, x []float32) error {
	p, l := ps.m.p, &ps.m.layers[il]
	normed := make([]float32, len(x))
	ops.RMSNorm(normed, x, l.ffnNorm, p.Embd, p.Eps)
	b, err := ps.route(l, normed)
	if err != nil {
		return err
	}
	return ps.m.experts.HintExperts(il, slices.Clone(b.Experts), true)
}

// lookaheadDepth is how many layers ahead experts are predicted.
func (m *Model) lookaheadDepth() int {
	if m.experts == nil {
		return 0
	}
	return m.experts.Lookahead()
}

// lookahead reports whether layer il's experts should be predicted.
func (m *Model) lookahead(il int) bool {
	return m.experts != nil && m.experts.Lookahead() > 0 && il < m.p.Layers && il >= m.p.DenseLead
}

// useStager makes the model read routed experts through w when w stages
// them, and re-read every tensor when the stager moves them.
func (m *Model) useStager(w model.Weights) {
	src, ok := w.(engine.ExpertSource)
	if !ok {
		return
	}
	m.experts = src
	src.OnRemap(func() error { return m.rebind(w) })
}

// rebind points every tensor at w's current bytes and rebuilds the float
// views. It runs between stager calls of a forward pass, when no view of
// the old bytes is in use.
func (m *Model) rebind(w model.Weights) error {
	errs := []error{model.Bind(w, "", &m.top)}
	for il := range m.layers {
		errs = append(errs, model.Bind(w, fmt.Sprintf("blk.%d.", il), &m.layers[il]))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kimi-k3: rebind: %w", err)
	}
	return m.prepare()
}
