package moe

import (
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
)

// expertMats are the weights of the experts a layer's batch chose (in the
// order of Batch.Experts): views of the mapped file, or, for experts
// [base, base+n), slices the source acquired for this step.
type expertMats struct {
	l           *Layer
	experts     []int32
	base        int
	in, ff, out int
	set         ExpertSet // nil: views of the file
}

// in, ff and out are an expert's input, hidden and output widths.
func (l *Layer) in() int  { return int(l.GateExps.Shape[0]) }
func (l *Layer) ff() int  { return int(l.GateExps.Shape[1]) }
func (l *Layer) out() int { return int(l.DownExps.Shape[1]) }

// acquire gets the weights of experts [lo, hi) of l. With an expert
// source they are acquired (and pinned until release).
func (r *Runner) acquire(l *Layer, experts []int32, lo, hi int) (*expertMats, error) {
	ex := &expertMats{l: l, experts: experts, base: lo, in: l.in(), ff: l.ff(), out: l.out()}
	if r.Source == nil {
		return ex, nil
	}
	set, err := r.Source.AcquireExperts(l.Index, []string{l.GateExps.Name, l.UpExps.Name, l.DownExps.Name}, experts[lo:hi])
	if err != nil {
		return nil, err
	}
	ex.set = set
	return ex, nil
}

// mats are gate, up and down of the i-th chosen expert.
func (ex *expertMats) mats(i int) (gate, up, down ops.Matrix) {
	l, ff, out := ex.l, ex.ff, ex.out
	if ex.set == nil {
		e := int(ex.experts[i])
		return l.GateExps.Matrix().Slice(e*ff, (e+1)*ff), l.UpExps.Matrix().Slice(e*ff, (e+1)*ff), l.DownExps.Matrix().Slice(e*out, (e+1)*out)
	}
	part := func(t *model.Tensor, j, rows int) ops.Matrix {
		return ops.Matrix{Type: t.Type, Rows: rows, Cols: int(t.Shape[0]), Data: ex.set.Bytes(j, i-ex.base), Transient: true}
	}
	return part(l.GateExps, 0, ff), part(l.UpExps, 1, ff), part(l.DownExps, 2, out)
}

func (ex *expertMats) release() error {
	if ex.set == nil {
		return nil
	}
	return ex.set.Release()
}
