package kimik3

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/moe"
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

// need returns an error naming the layer tensors (by tag) that are nil.
func need(il int, l *layer, fields ...string) error {
	var missing []string
	v := reflect.ValueOf(l).Elem()
	for _, f := range fields {
		if v.FieldByName(f).IsNil() {
			sf, _ := v.Type().FieldByName(f)
			name, _ := model.TensorName(fmt.Sprintf("blk.%d.", il), sf.Tag.Get("gguf"))
			missing = append(missing, strconv.Quote(name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("layer %d: missing tensors %s", il, strings.Join(missing, ", "))
	}
	return nil
}

func (m *Model) layerChecks(il int) ([]shapeCheck, error) {
	p := m.p
	l := &m.layers[il]
	e, h := int64(p.Embd), int64(p.Heads)
	cs := []shapeCheck{{l.AttnNorm, []int64{e}}, {l.FFNNorm, []int64{e}}}
	var errs []error
	if p.ResBlock > 0 {
		errs = append(errs, need(il, l, "AttnScore", "FFNScore"))
		cs = append(cs, shapeCheck{l.AttnScore, []int64{e}}, shapeCheck{l.FFNScore, []int64{e}})
	}
	if p.recurrent(il) {
		hd, k := int64(p.KDAHead), int64(p.ConvK)
		di := hd * h
		errs = append(errs, need(il, l, "ConvQ", "ConvK", "ConvV", "Q", "K", "V", "FA", "FB", "Beta", "A", "DtB", "G", "ONorm", "Out"))
		cs = append(cs,
			shapeCheck{l.ConvQ, []int64{k, 1, di}}, shapeCheck{l.ConvK, []int64{k, 1, di}}, shapeCheck{l.ConvV, []int64{k, 1, di}},
			shapeCheck{l.Q, []int64{e, di}}, shapeCheck{l.K, []int64{e, di}}, shapeCheck{l.V, []int64{e, di}},
			shapeCheck{l.FA, []int64{e, hd}}, shapeCheck{l.FB, []int64{hd, di}}, shapeCheck{l.Beta, []int64{e, h}},
			shapeCheck{l.A, []int64{h}}, shapeCheck{l.DtB, []int64{di}}, shapeCheck{l.G, []int64{e, di}},
			shapeCheck{l.ONorm, []int64{hd}}, shapeCheck{l.Out, []int64{di, e}})
	} else {
		kd, vd, kv, rot := int64(p.kDim()), int64(p.vDim()), int64(p.KVLora), int64(p.Rot)
		nope := kd - rot
		errs = append(errs, need(il, l, "KVANorm", "KVA", "Out"))
		cs = append(cs, shapeCheck{l.KVANorm, []int64{kv}}, shapeCheck{l.KVA, []int64{e, kv + rot}},
			shapeCheck{l.Out, []int64{h * vd, e}})
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
	}
	if il < p.DenseLead {
		errs = append(errs, need(il, l, "FFNGate", "FFNUp", "FFNDown"))
		ff := int64(p.FF[il])
		cs = append(cs, shapeCheck{l.FFNGate, []int64{e, ff}}, shapeCheck{l.FFNUp, []int64{e, ff}}, shapeCheck{l.FFNDown, []int64{ff, e}})
	} else {
		ne, fe, lat := int64(p.Router.Experts), int64(p.FFExp), int64(p.latent())
		errs = append(errs, need(il, l, "Router", "ProbsB", "GateExps", "UpExps", "DownExps"))
		cs = append(cs, shapeCheck{l.Router, []int64{e, ne}}, shapeCheck{l.ProbsB, []int64{ne}},
			shapeCheck{l.GateExps, []int64{lat, fe, ne}}, shapeCheck{l.UpExps, []int64{lat, fe, ne}},
			shapeCheck{l.DownExps, []int64{fe, lat, ne}})
		if p.Latent > 0 {
			errs = append(errs, need(il, l, "RoutedDown", "RoutedUp"))
			cs = append(cs, shapeCheck{l.RoutedDown, []int64{e, lat}}, shapeCheck{l.RoutedUp, []int64{lat, e}})
			if l.RoutedNorm != nil {
				cs = append(cs, shapeCheck{l.RoutedNorm, []int64{lat}})
			}
		}
		if l.GateSh != nil || l.UpSh != nil || l.DownSh != nil {
			errs = append(errs, need(il, l, "GateSh", "UpSh", "DownSh"))
			fs := fe * int64(max(p.Shared, 1))
			cs = append(cs, shapeCheck{l.GateSh, []int64{e, fs}}, shapeCheck{l.UpSh, []int64{e, fs}}, shapeCheck{l.DownSh, []int64{fs, e}})
		}
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
		l.convQ, l.convK, l.convV, l.a, l.dtB, l.oNorm = fl(l.ConvQ), fl(l.ConvK), fl(l.ConvV), fl(l.A), fl(l.DtB), fl(l.ONorm)
		l.qaNorm, l.kvaNorm, l.probsB, l.routedNorm = fl(l.QANorm), fl(l.KVANorm), fl(l.ProbsB), fl(l.RoutedNorm)
		l.routed = moe.Layer{Index: il, GateInp: l.Router, Bias: l.probsB, GateExps: l.GateExps, UpExps: l.UpExps, DownExps: l.DownExps}
		for _, t := range []*T{l.Out, l.Q, l.K, l.V, l.FA, l.FB, l.Beta, l.G, l.QA, l.QB, l.KVA, l.KVB, l.KB, l.VB, l.Gate,
			l.FFNGate, l.FFNUp, l.FFNDown, l.Router, l.GateExps, l.UpExps, l.DownExps, l.RoutedDown, l.RoutedUp, l.GateSh, l.UpSh, l.DownSh} {
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
