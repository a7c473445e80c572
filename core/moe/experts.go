package moe

import (
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
)

// expertMats are the weights of some of the experts a layer's batch chose:
// at lists their indexes into Batch.Experts, and the weights are views of
// the mapped file or slices the source acquired for this step (in at's
// order).
type expertMats struct {
	l           *Layer
	experts     []int32
	at          []int
	in, ff, out int
	set         ExpertSet // nil: views of the file
}

// in, ff and out are an expert's input, hidden and output widths.
func (l *Layer) in() int  { return int(l.GateExps.Shape[0]) }
func (l *Layer) ff() int  { return int(l.GateExps.Shape[1]) }
func (l *Layer) out() int { return int(l.DownExps.Shape[1]) }

func (l *Layer) tensorNames() []string {
	return []string{l.GateExps.Name, l.UpExps.Name, l.DownExps.Name}
}

// acquire gets the weights of the chosen experts at (indexes into
// experts). With an expert source they are acquired, waiting for every one,
// and pinned until release.
func (r *Runner) acquire(l *Layer, experts []int32, at []int) (*expertMats, error) {
	ex := &expertMats{l: l, experts: experts, at: at, in: l.in(), ff: l.ff(), out: l.out()}
	if r.Source == nil {
		return ex, nil
	}
	set, err := r.Source.AcquireExperts(l.Index, l.tensorNames(), pick(experts, at))
	if err != nil {
		return nil, err
	}
	ex.set = set
	return ex, nil
}

// acquireReady gets, of the chosen experts at, the first (waiting for it)
// and every other one the source holds already (ReadySource).
func (r *Runner) acquireReady(rs ReadySource, l *Layer, experts []int32, at []int) (*expertMats, error) {
	set, ready, err := rs.AcquireReady(l.Index, l.tensorNames(), pick(experts, at), 1)
	if err != nil {
		return nil, err
	}
	got := make([]int, len(ready))
	for j, i := range ready {
		got[j] = at[i]
	}
	return &expertMats{l: l, experts: experts, at: got, in: l.in(), ff: l.ff(), out: l.out(), set: set}, nil
}

func pick(experts []int32, at []int) []int32 {
	out := make([]int32, len(at))
	for j, i := range at {
		out[j] = experts[i]
	}
	return out
}

// mats are gate, up and down of the j-th expert of ex (chosen expert
// ex.at[j]).
func (ex *expertMats) mats(j int) (gate, up, down ops.Matrix) {
	l, ff, out := ex.l, ex.ff, ex.out
	if ex.set == nil {
		e := int(ex.experts[ex.at[j]])
		return l.GateExps.Matrix().Slice(e*ff, (e+1)*ff), l.UpExps.Matrix().Slice(e*ff, (e+1)*ff), l.DownExps.Matrix().Slice(e*out, (e+1)*out)
	}
	part := func(t *model.Tensor, k, rows int) ops.Matrix {
		return ops.Matrix{Type: t.Type, Rows: rows, Cols: int(t.Shape[0]), Data: ex.set.Bytes(k, j), Transient: true}
	}
	return part(l.GateExps, 0, ff), part(l.UpExps, 1, ff), part(l.DownExps, 2, out)
}

func (ex *expertMats) release() error {
	if ex.set == nil {
		return nil
	}
	return ex.set.Release()
}
