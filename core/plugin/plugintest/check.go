package plugintest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
)

// Runner drives a Stager through a decode-like sequence the way the engine
// will (hint the current layer, hint the next one speculatively, acquire,
// compute, release) and checks every acquired byte against the files.
type Runner struct {
	St    plugin.Stager
	M     *Model
	views *plugin.Views
	steps uint64

	mu  sync.Mutex // Check may run concurrently
	sum hash.Hash
}

// NewRunner opens st with req and maps its regions. Like the host, it
// asks st which options it declares first and opens it with req.Options
// checked against them, defaults filled in.
func NewRunner(ctx context.Context, st plugin.Stager, m *Model, req *plugin.OpenRequest) (*Runner, *plugin.OpenResponse, error) {
	info, err := st.Describe(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("describe: %w", err)
	}
	r0 := *req
	if r0.Options, err = host.ResolveOptions(info.Name, info.Options, req.Options, nil); err != nil {
		return nil, nil, err
	}
	req = &r0
	resp, err := st.Open(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	r := &Runner{St: st, M: m, sum: newHash()}
	if err := r.Remap(resp.Regions); err != nil {
		return nil, nil, err
	}
	return r, resp, nil
}

// Remap maps a new set of regions, as after a plugin restart.
func (r *Runner) Remap(regions []plugin.Region) error {
	if r.views != nil {
		r.views.Close()
	}
	v, err := plugin.MapRegions(regions)
	if err != nil {
		return err
	}
	r.views = v
	return nil
}

// Close unmaps the regions (the stager is the caller's to close).
func (r *Runner) Close() {
	if r.views != nil {
		r.views.Close()
	}
}

// Digest is a hash of every byte acquired so far, in order.
func (r *Runner) Digest() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sum.Sum(nil)
}

// Step runs one layer of one token: experts are the layer's routed
// experts, next the experts predicted for the following layer (nil for the
// last). It acquires every routed tensor of those experts plus the layer's
// always-needed tensors, and checks their bytes.
func (r *Runner) Step(ctx context.Context, layer int, experts, next []int) error {
	if err := r.St.Hint(ctx, &plugin.HintRequest{Layer: layer, Experts: experts}); err != nil {
		return err
	}
	if next != nil && layer+1 < r.M.Layers {
		if err := r.St.Hint(ctx, &plugin.HintRequest{Layer: layer + 1, Experts: next, Speculative: true}); err != nil {
			return err
		}
	}
	slices := r.stepSlices(layer, experts)
	r.steps++
	step := r.steps
	if err := r.Check(ctx, step, slices); err != nil {
		return err
	}
	return r.St.Release(ctx, &plugin.ReleaseRequest{Step: step})
}

// stepSlices are the layer's always-needed tensors and the experts'
// slices of its routed tensors.
func (r *Runner) stepSlices(layer int, experts []int) []plugin.Slice {
	var slices []plugin.Slice
	for _, id := range r.M.Resident() {
		if r.M.Req.Tensors[id].Layer == layer {
			slices = append(slices, plugin.Slice{Tensor: id})
		}
	}
	for _, id := range r.M.Routed(layer) {
		for _, e := range experts {
			slices = append(slices, plugin.Slice{Tensor: id, Expert: e})
		}
	}
	return slices
}

// Check acquires slices for step and compares each with the file. The
// caller releases the step.
func (r *Runner) Check(ctx context.Context, step uint64, slices []plugin.Slice) error {
	resp, err := r.St.Acquire(ctx, &plugin.AcquireRequest{Step: step, Slices: slices})
	if err != nil {
		return err
	}
	if len(resp.Locations) != len(slices) {
		return fmt.Errorf("acquire: %d locations for %d slices", len(resp.Locations), len(slices))
	}
	for i, sl := range slices {
		want, err := r.M.Want(sl)
		if err != nil {
			return err
		}
		got, err := r.views.Bytes(resp.Locations[i])
		if err != nil {
			return fmt.Errorf("slice %d (%s expert %d): %w", i, r.M.Req.Tensors[sl.Tensor].Name, sl.Expert, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("slice %d (%s expert %d) at %+v: %d bytes differ from the file (got %d bytes)",
				i, r.M.Req.Tensors[sl.Tensor].Name, sl.Expert, resp.Locations[i], countDiff(got, want), len(got))
		}
		r.mu.Lock()
		r.sum.Write(got)
		r.mu.Unlock()
	}
	r.views.Forget(resp.Locations)
	return nil
}

func countDiff(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}

// Run plays the whole trace: every token through every layer, with the
// next layer's true experts as the speculative hint.
func (r *Runner) Run(ctx context.Context, tr Trace) error {
	for t := range tr {
		if err := r.RunToken(ctx, tr, t); err != nil {
			return err
		}
	}
	return nil
}

// RunToken plays token t of tr.
func (r *Runner) RunToken(ctx context.Context, tr Trace, t int) error {
	for l := 0; l < r.M.Layers; l++ {
		if err := r.TraceStep(ctx, tr, t, l); err != nil {
			return err
		}
	}
	return nil
}

// TraceStep plays layer l of token t of tr, hinting the next layer's true
// experts speculatively.
func (r *Runner) TraceStep(ctx context.Context, tr Trace, t, l int) error {
	var next []int
	if l+1 < r.M.Layers {
		next = tr[t][l+1]
	}
	if err := r.Step(ctx, l, tr[t][l], next); err != nil {
		return fmt.Errorf("token %d layer %d: %w", t, l, err)
	}
	return nil
}

// CheckStats checks invariants every stager's stats must hold after a run.
func CheckStats(st *plugin.Stats, budget int64) error {
	var errs []error
	if st.ResidentBytes > budget {
		errs = append(errs, fmt.Errorf("resident %d bytes over the %d budget", st.ResidentBytes, budget))
	}
	if st.Hits+st.Misses == 0 {
		errs = append(errs, errors.New("no hits or misses counted"))
	}
	if st.BudgetBytes != budget {
		errs = append(errs, fmt.Errorf("stats budget %d, opened with %d", st.BudgetBytes, budget))
	}
	return errors.Join(errs...)
}

func newHash() hash.Hash { return sha256.New() }
