package moe

import (
	"fmt"
	"slices"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
)

// Layer is the routed part of one MoE FFN: the tensors llama.cpp's
// build_moe_ffn takes. Shared experts, and whatever an architecture puts
// around the routed experts (Kimi K3's latent down and up projections),
// stay with the architecture.
type Layer struct {
	// Index is the block number, the layer an ExpertSource is told about.
	Index int
	// GateInp is the router, ffn_gate_inp [n_embd, n_expert].
	GateInp *model.Tensor
	// Bias is exp_probs_b: it shifts the selection, not the weights (nil:
	// none).
	Bias []float32
	// GateExps and UpExps are [in, ff, n_expert], DownExps [ff, out,
	// n_expert]: each expert is down(act(gate·x, up·x)).
	GateExps, UpExps, DownExps *model.Tensor
}

// Runner is the streaming expert runner every MoE architecture calls, the
// counterpart of llama.cpp's build_moe_ffn: it routes a batch, tells the
// expert source at once which experts it will read, acquires them in
// groups that fit the memory budget, runs each group's matrix products in
// batches (every chosen expert's weights read once for the whole batch),
// releases them, and guesses later layers' experts ahead.
type Runner struct {
	Router Router
	// Act combines an expert's gate and up products into gate, in place:
	// SiLU(gate)·up for most architectures, SiTU for Kimi K3.
	Act func(gate, up []float32)
	// Pool runs the matrix products.
	Pool *ops.Pool
	// Source serves the routed experts when a stager holds them; nil:
	// the expert tensors are views of the mapped file.
	Source ExpertSource
	// Trace, when set, records every one-token routing and a guess of each
	// MoE layer from the layer before (Lookahead is then at least 1, with
	// or without a source).
	Trace *RoutingStats

	spec speculation
}

// Routed reports whether the named tensor's bytes come from the expert
// source expert by expert; such a tensor carries no data of its own.
func (r *Runner) Routed(name string) bool {
	return r.Source != nil && r.Source.Routed(name)
}

// Lookahead is how many layers ahead the architecture should call Predict
// after each layer (0: none).
func (r *Runner) Lookahead() int {
	n := 0
	if r.Source != nil {
		n = r.Source.Lookahead()
	}
	if r.Trace != nil {
		n = max(n, 1)
	}
	return n
}

// Route scores x (n rows) with l's router, picks each token's experts and
// groups the batch by expert. With an expert source the choice is hinted
// at once, so the reads overlap whatever the architecture computes before
// Run. Buffers come from sc, which must outlive the call to Run.
func (r *Runner) Route(l *Layer, x []float32, n int, sc *ops.Scratch) (*Batch, error) {
	b, err := r.route(l, x, n, sc)
	if err != nil {
		return nil, err
	}
	return b, r.chosen(l, b, n)
}

// chosen records and hints the experts a batch of n tokens chose.
func (r *Runner) chosen(l *Layer, b *Batch, n int) error {
	if r.Trace != nil && n == 1 {
		r.Trace.Chosen(l.Index, r.Router.Experts, b.IDs)
	}
	if r.Source != nil {
		if n == 1 {
			// The guessed experts' reads began a layer ago: computing
			// them first lets the first groups start while the rest read,
			// instead of waiting in expert-id order for a mix of both.
			ahead := r.spec.ahead(l.Index)
			r.spec.score(l.Index, b.Experts)
			b.Front(ahead)
		} else {
			// The same for a many-token batch (a prompt chunk): the
			// guessed experts were read while the layers before ran.
			b.Front(r.spec.takeMany(l.Index))
		}
		return r.Source.HintExperts(l.Index, b.Experts, false)
	}
	return nil
}

// Predict guesses l's experts before its input exists: x is an earlier
// layer's output, normed as l's router input would be. The guess goes to
// the expert source as a speculative hint, most confident first, so the
// reads overlap the layers in between. A one-token guess is cut to what
// pays (speculation.count): the ranks whose measured precision keeps the
// expected wrong reads within wasteShare of the token's experts, and at
// most a third of what the source holds at once beside the layer being
// computed, so guesses do not push out the units it needs; a many-token
// guess is cut to that third too. A FixedLookahead source gets every
// guess.
func (r *Runner) Predict(l *Layer, x []float32, n int, sc *ops.Scratch) error {
	b, err := r.route(l, x, n, sc)
	if err != nil {
		return err
	}
	return r.guess(l, b, n)
}

// guess hints a predicted batch's experts, most confident first.
func (r *Runner) guess(l *Layer, b *Batch, n int) error {
	ranked := rank(b)
	if r.Trace != nil && n == 1 {
		r.Trace.Guess(l.Index, ranked)
	}
	if r.Source == nil {
		return nil
	}
	if n == 1 {
		r.spec.remember(l.Index, ranked)
		if fixed, ok := r.Source.(FixedLookahead); !ok || !fixed.FixedLookahead() {
			ranked = ranked[:r.spec.count(b.Used, min(len(ranked), max(1, r.Source.MaxExperts(l.Index)/3)))]
		}
		r.spec.hinted(l.Index, len(ranked))
	} else {
		// A prompt chunk's guess names nearly every expert of the layer:
		// hinting all of them reads units that push out each other, and
		// the current layer's, before they are used (a 2,048-token chunk
		// read 14% more than without lookahead). The most-weighted third
		// of what the source holds at once is what stays resident until
		// the layer runs them first (Route fronts them).
		if fixed, ok := r.Source.(FixedLookahead); !ok || !fixed.FixedLookahead() {
			ranked = ranked[:min(len(ranked), max(1, r.Source.MaxExperts(l.Index)/3))]
		}
		r.spec.rememberMany(l.Index, ranked)
	}
	return r.Source.HintExperts(l.Index, ranked, true)
}

func (r *Runner) route(l *Layer, x []float32, n int, sc *ops.Scratch) (*Batch, error) {
	logits := sc.Floats(n * l.GateInp.Matrix().Rows)
	if err := r.Logits(l, x, n, logits); err != nil {
		return nil, err
	}
	return r.pick(l, logits, n), nil
}

// Logits scores x (n rows) with l's router into logits (n rows of the
// layer's experts): the first step of Route and Predict, which a long
// forward call takes a few rows at a time (RouteLogits, PredictLogits).
func (r *Runner) Logits(l *Layer, x []float32, n int, logits []float32) error {
	if err := r.Pool.MatMul(l.GateInp.Matrix(), x, n, logits); err != nil {
		return fmt.Errorf("%s: %w", l.GateInp.Name, err)
	}
	return nil
}

// pick chooses each token's experts from its router logits and groups the
// batch by expert.
func (r *Runner) pick(l *Layer, logits []float32, n int) *Batch {
	k, ne := r.Router.Used, r.Router.Experts
	b := new(Batch)
	b.Reset(n, k)
	r.Pool.For(n, 8, func(lo, hi int) {
		var s Scratch
		for t := lo; t < hi; t++ {
			r.Router.Route(logits[t*ne:(t+1)*ne], l.Bias, b.IDs[t*k:(t+1)*k], b.Weights[t*k:(t+1)*k], &s)
		}
	})
	b.Group(ne)
	return b
}

// RouteLogits is Route on router logits computed before (Logits).
func (r *Runner) RouteLogits(l *Layer, logits []float32, n int) (*Batch, error) {
	b := r.pick(l, logits, n)
	return b, r.chosen(l, b, n)
}

// PredictLogits is Predict on router logits computed before (Logits).
func (r *Runner) PredictLogits(l *Layer, logits []float32, n int) error {
	return r.guess(l, r.pick(l, logits, n), n)
}

// FFN is Route then Run on x itself: the routed experts of an
// architecture with nothing between its router and its experts (deepseek2,
// qwen3moe, ...). Shared experts stay the architecture's to add.
func (r *Runner) FFN(l *Layer, x []float32, n int, sc *ops.Scratch) ([]float32, error) {
	b, err := r.Route(l, x, n, sc)
	if err != nil {
		return nil, err
	}
	return r.Run(l, b, x, sc)
}

// Run runs the experts b chose on in (a row of the experts' input width
// per token) and returns each token's sum of its experts' weighted outputs,
// added in slot order as ggml adds them. With an expert source the experts
// run in small groups, each acquired as soon as the one before it is
// computed, while the reads of the next ones (hinted up to what the
// source holds at once) go on: compute overlaps the layer's reads, and
// every expert is still read once per batch.
func (r *Runner) Run(l *Layer, b *Batch, in []float32, sc *ops.Scratch) ([]float32, error) {
	k := b.Used
	n, out := len(b.IDs)/k, l.out()
	outs := make([]float32, len(b.IDs)*out)
	if err := r.Outs(l, b, in, outs, sc); err != nil {
		return nil, err
	}
	sum := make([]float32, n*out)
	SumSlots(outs, k, out, 0, n, sum)
	return sum, nil
}

// SumSlots writes into sum the rows lo..hi of the per-slot outputs outs
// (Outs: k slots of width out per token) added in slot order, as ggml
// adds them; sum holds hi-lo rows.
func SumSlots(outs []float32, k, out, lo, hi int, sum []float32) {
	for t := lo; t < hi; t++ {
		o := sum[(t-lo)*out : (t-lo+1)*out]
		copy(o, outs[t*k*out:(t*k+1)*out])
		for s := 1; s < k; s++ {
			ops.Add(o, outs[(t*k+s)*out:(t*k+s+1)*out])
		}
	}
}

// pipeGroups is how many acquire groups a window of hinted experts splits
// into: the first group computes while the others' reads finish.
const pipeGroups = 4

// Outs writes into outs (len(b.IDs) rows of the experts' output width)
// each routed expert's weighted output: outs[(t*k+slot)*out:] is slot's
// for token t. Run sums them; a long forward call keeps them and sums a
// few rows at a time (SumSlots). The experts' working buffers come from
// sc and are given back after each group, so they stay bounded whatever
// the batch. The source holds window experts at once (Route hinted the
// first window). Each round acquires some of the experts not yet
// computed, hints further ones so that window experts stay pinned or in
// flight, and computes what it acquired: so the reads never wait for
// compute. From a ReadySource a round takes the first expert left
// (waiting for it) and every other hinted one already resident, so cached
// experts go first and compute waits for no more than one read; from
// another source, the next step experts in order.
func (r *Runner) Outs(l *Layer, b *Batch, in, outs []float32, sc *ops.Scratch) error {
	if len(outs) < len(b.IDs)*l.out() {
		return fmt.Errorf("moe: %d outputs for %d routed rows of %d", len(outs), len(b.IDs), l.out())
	}
	n := len(b.Experts)
	left := make([]int, n) // chosen experts not yet computed, in order
	for i := range left {
		left[i] = i
	}
	if r.Source == nil {
		ex, _ := r.acquire(l, b.Experts, left)
		return r.experts(b, ex, in, outs, sc)
	}
	window := min(n, r.Source.MaxExperts(l.Index))
	step := max(1, (window+pipeGroups-1)/pipeGroups)
	rs, _ := r.Source.(ReadySource)
	hinted := window
	for len(left) > 0 {
		var ex *expertMats
		var err error
		if rs != nil {
			// The hinted experts left; the first left if none is.
			i, _ := slices.BinarySearch(left, hinted)
			ex, err = r.acquireReady(rs, l, b.Experts, left[:max(i, 1)])
		} else {
			ex, err = r.acquire(l, b.Experts, slices.Clone(left[:min(step, len(left))]))
		}
		if err != nil {
			return err
		}
		left = without(left, ex.at)
		// Pinned now: ex's experts; in flight: the hinted ones left.
		inflight, _ := slices.BinarySearch(left, hinted)
		if end := min(n, hinted+window-len(ex.at)-inflight); end > hinted {
			err = r.Source.HintExperts(l.Index, b.Experts[hinted:end], false)
			hinted = end
		}
		if err == nil {
			err = r.experts(b, ex, in, outs, sc)
		}
		if rerr := ex.release(); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// without returns the ascending xs less the ascending drop, in place.
func without(xs, drop []int) []int {
	out, j := xs[:0], 0
	for _, x := range xs {
		for j < len(drop) && drop[j] < x {
			j++
		}
		if j < len(drop) && drop[j] == x {
			continue
		}
		out = append(out, x)
	}
	return out
}

// GroupBytes bounds the working buffers of one batch of experts' products
// (their gathered inputs, gate, up and down outputs), unless a single
// expert's rows take more; they are given back after each batch.
const GroupBytes = 16 << 20

// experts runs the experts of ex into outs. The experts' gate and up
// products go in one batch, their down products in another, in groups
// whose buffers stay under GroupBytes.
func (r *Runner) experts(b *Batch, ex *expertMats, in, outs []float32, sc *ops.Scratch) error {
	perRow := 4 * (ex.in + 2*ex.ff + ex.out)
	rowsOf := func(j int) int { i := ex.at[j]; return b.Start[i+1] - b.Start[i] }
	for lo, end := 0, len(ex.at); lo < end; {
		hi, rows := lo, 0
		for hi < end && (hi == lo || (rows+rowsOf(hi))*perRow <= GroupBytes) {
			rows += rowsOf(hi)
			hi++
		}
		mark := sc.Mark()
		err := r.group(b, ex, in, outs, lo, hi, sc)
		sc.Rewind(mark) // nothing of a group outlives it
		if err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// group runs experts [lo, hi) of ex.
func (r *Runner) group(b *Batch, ex *expertMats, in, outs []float32, lo, hi int, sc *ops.Scratch) error {
	k, din, ff, dout := b.Used, ex.in, ex.ff, ex.out
	type run struct{ g, u, d []float32 }
	runs := make([]run, hi-lo)
	gu := make([]ops.MatMulOp, 0, 2*(hi-lo))
	down := make([]ops.MatMulOp, 0, hi-lo)
	for j := lo; j < hi; j++ {
		i := ex.at[j]
		sel := b.Rows[b.Start[i]:b.Start[i+1]]
		m := len(sel)
		xe := sc.Floats(m * din)
		for r, row := range sel {
			t := int(row) / k
			copy(xe[r*din:(r+1)*din], in[t*din:(t+1)*din])
		}
		gate, up, dw := ex.mats(j)
		ru := run{g: sc.Floats(m * ff), u: sc.Floats(m * ff), d: sc.Floats(m * dout)}
		runs[j-lo] = ru
		gu = append(gu, ops.MatMulOp{W: gate, X: xe, N: m, Out: ru.g}, ops.MatMulOp{W: up, X: xe, N: m, Out: ru.u})
		down = append(down, ops.MatMulOp{W: dw, X: ru.g, N: m, Out: ru.d})
	}
	if err := r.Pool.MatMuls(gu...); err != nil {
		return err
	}
	for _, ru := range runs {
		r.Act(ru.g, ru.u)
	}
	if err := r.Pool.MatMuls(down...); err != nil {
		return err
	}
	for j := lo; j < hi; j++ {
		i := ex.at[j]
		sel := b.Rows[b.Start[i]:b.Start[i+1]]
		d := runs[j-lo].d
		for r, row := range sel {
			w := b.Weights[row]
			dst := outs[int(row)*dout : (int(row)+1)*dout]
			for j, v := range d[r*dout : (r+1)*dout] {
				dst[j] = v * w
			}
		}
	}
	return nil
}

// Dense is down(Act(gate·x, up·x)) over n rows of x: the FFN of an
// architecture's dense layers and of its shared experts, which use the
// routed experts' activation.
func (r *Runner) Dense(gate, up, down *model.Tensor, x []float32, n int, sc *ops.Scratch) ([]float32, error) {
	w := model.Work{Pool: r.Pool, Sc: sc}
	gu, err := w.MatMuls(x, n, gate, up)
	if err != nil {
		return nil, err
	}
	r.Act(gu[0], gu[1])
	return w.MatMul(down, gu[0], n)
}
