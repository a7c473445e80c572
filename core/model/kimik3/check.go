package kimik3

import (
	"errors"
	"fmt"

	"github.com/k3-inference/k3/core/model"
)

type shapeCheck struct {
	t     *T
	shape []int64
}

// check verifies what llama.cpp's load_arch_tensors requires of each
// tensor: presence per layer kind and the exact shape.
func (m *Model) check() error {
	p := m.p
	e := int64(p.Embd)
	if len(m.top.Embd.Shape) != 2 || m.top.Embd.Shape[0] != e {
		return fmt.Errorf("tensor %q: shape %v, want [%d n_vocab]", m.top.Embd.Name, m.top.Embd.Shape, e)
	}
	m.vocab = int(m.top.Embd.Shape[1])
	v := int64(m.vocab)
	checks := []shapeCheck{{m.top.OutNorm, []int64{e}}, {m.top.Output, []int64{e, v}}}
	var errs []error
	if p.ResBlock > 0 {
		checks = append(checks, shapeCheck{m.top.OutScore, []int64{e}})
	}
	for il := range m.layers {
		cs, err := m.layerChecks(il)
		if err != nil {
			errs = append(errs, err)
		}
		checks = append(checks, cs...)
	}
	for _, c := range checks {
		if c.t == nil {
			continue // reported by layerChecks
		}
		if err := c.t.CheckShape(c.shape...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// need returns an error naming the tensors of part (a pointer to a
// struct of tagged tensor fields) that are nil.
func need(il int, part any, fields ...string) error { return model.Need(il, part, fields...) }

// layerChecks are layer il's checks: its own tensors' and its parts'.
func (m *Model) layerChecks(il int) ([]shapeCheck, error) {
	p := m.p
	l := &m.layers[il]
	e := int64(p.Embd)
	cs := []shapeCheck{{l.AttnNorm, []int64{e}}, {l.FFNNorm, []int64{e}}}
	var errs []error
	if p.ResBlock > 0 {
		errs = append(errs, need(il, l, "AttnScore", "FFNScore"))
		cs = append(cs, shapeCheck{l.AttnScore, []int64{e}}, shapeCheck{l.FFNScore, []int64{e}})
	}
	for _, part := range []part{l.attn, l.ffn} {
		pc, err := part.checks(p, il)
		cs = append(cs, pc...)
		errs = append(errs, err)
	}
	return cs, errors.Join(errs...)
}

// prepare makes float views of the small tensors and checks that every
// matrix has a dot product.
func (m *Model) prepare() error {
	var errs []error
	fl := func(t *T) []float32 {
		if t == nil {
			return nil
		}
		f, err := t.Floats()
		if err != nil {
			errs = append(errs, err)
		}
		return f
	}
	m.top.outNorm, m.top.outScore = fl(m.top.OutNorm), fl(m.top.OutScore)
	for il := range m.layers {
		l := &m.layers[il]
		l.attnNorm, l.ffnNorm, l.attnScore, l.ffnScore = fl(l.AttnNorm), fl(l.FFNNorm), fl(l.AttnScore), fl(l.FFNScore)
		for _, t := range append(l.attn.prepare(fl), l.ffn.prepare(fl)...) {
			if t != nil {
				w := mat(t)
				if m.experts.Routed(t.Name) {
					w.Rows = 0 // a stager serves the bytes expert by expert
				}
				if err := w.Check(); err != nil {
					errs = append(errs, fmt.Errorf("tensor %q: %w", t.Name, err))
				}
			}
		}
	}
	if err := mat(m.top.Output).Check(); err != nil {
		errs = append(errs, fmt.Errorf("tensor %q: %w", m.top.Output.Name, err))
	}
	return errors.Join(errs...)
}
