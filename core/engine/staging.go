package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/ggufreq"
	"github.com/k3-inference/k3/core/plugin/host"
)

// StageOptions say how to start and open a stager for a model.
type StageOptions struct {
	Launch host.Launch
	// Memory is the memory budget in bytes: the core keeps State and
	// Headroom(Memory) of it, the stager gets the rest. OpenStaged refuses
	// a budget that cannot run one step (BudgetError).
	Memory int64
	// State is what the sequence state can reach at Context tokens.
	State   int64
	Context int
	// Budget, without Memory, is the stager's part given directly; with
	// neither, the stager gets room for every expert.
	Budget int64
	// Footprint is how the stager sizes what it holds; nil: PageFootprint.
	Footprint Footprint
	// UBatch is the most tokens one forward call runs; it bounds the
	// experts one step chooses. <= 0: with Memory, the largest chunk the
	// budget allows (Budget.Chunk, from the Activations* fields), else
	// DefaultUBatch.
	UBatch int
	// ActivationsFixed and ActivationsPerToken are the working memory of
	// a forward call (model.Arch.Activations), which sizes the prefill
	// chunk when UBatch does not fix it. Zero per token: DefaultUBatch.
	ActivationsFixed, ActivationsPerToken int64
	// Experts says which tensors are routed experts (the architecture's
	// model.Arch.Experts); nil: llama.cpp's naming, model.LlamaExperts.
	Experts func(name string, shape []int64) bool
	// Options are the stager options the profile sets: each must be one
	// the stager declares (plugin.StagerInfo.Options), or OpenStaged
	// refuses it before any other work, naming the stager and the key.
	Options map[string]string
	// Implied are settings any stager may take (config's StagerOptions):
	// sent to a stager that declares them, dropped otherwise.
	Implied map[string]string
	// Lookahead enables speculative hints, LookaheadDepth layers ahead
	// (0: 1).
	Lookahead      bool
	LookaheadDepth int
	// LookaheadFixed hints every guess rather than as many as pay
	// (moe.FixedLookahead).
	LookaheadFixed bool
}

// Staged is a model's weights served by a supervised stager: the
// always-needed tensors are acquired once and stay pinned for the session;
// routed experts are acquired per layer and step, as the router picks them.
// It implements model.Weights and moe.ExpertSource.
type Staged struct {
	f         *gguf.File
	sup       *host.Supervisor
	req       *plugin.OpenRequest
	budget    Budget
	ids       map[string]int
	mode      string
	options   map[string]string
	lookahead int
	fixed     bool
	ctx       context.Context

	mu       sync.Mutex
	views    *plugin.Views
	resident map[int][]byte // always-needed bytes by tensor ID
	spans    [][]byte       // their own mappings of shard pages
	step     uint64
	onRemap  []func() error
	restarts int
	// gen is the stager process generation whose regions are mapped.
	gen int
	// predicted holds each layer's outstanding speculative hint, to score it
	// when the layer's router has chosen.
	predicted          map[int][]int32
	nPredicted, nRight uint64
	acquireTime        time.Duration
	acquires           uint64
	// layers holds, per layer, the wait in AcquireExperts and the time
	// the experts stayed acquired (their products).
	layers []LayerTime
}

var (
	_ moe.ExpertSource = (*Staged)(nil)
	_ moe.ReadySource  = (*Staged)(nil)
)

// residentStep pins the always-needed tensors; expert steps count up from it.
const residentStep = 1

// OpenStaged checks that o's budget runs one step of f's model, starts the
// stager o names, opens f's shards in it and pins the always-needed
// tensors.
func OpenStaged(ctx context.Context, f *gguf.File, o StageOptions) (*Staged, error) {
	req, err := o.openRequest(f)
	if err != nil {
		return nil, err
	}
	budget, err := planBudget(f, req, o)
	if err != nil {
		return nil, err
	}
	if err := budget.Check(); err != nil {
		return nil, err
	}
	sup, err := host.SuperviseStager(ctx, o.Launch)
	if err != nil {
		return nil, err
	}
	info, err := sup.Describe(ctx)
	if err == nil {
		req.Options, err = host.ResolveOptions("stager "+o.Launch.Name, info.Options, o.Options, o.Implied)
	} else {
		err = fmt.Errorf("stager %s: %w", o.Launch.Name, err)
	}
	if err != nil {
		sup.Close(ctx)
		return nil, err
	}
	req.Budget = budget.Stager
	dropCached(req.Shards)
	resp, err := sup.Open(ctx, req)
	if err != nil {
		sup.Close(ctx)
		return nil, fmt.Errorf("stager %s: open %s: %w", o.Launch.Name, f.Path(), err)
	}
	s := &Staged{f: f, sup: sup, req: req, budget: budget, ids: map[string]int{}, mode: resp.Mode, options: req.Options,
		ctx: context.WithoutCancel(ctx), step: residentStep, predicted: map[int][]int32{}}
	if o.Lookahead {
		s.lookahead = max(o.LookaheadDepth, 1)
	}
	s.fixed = o.LookaheadFixed
	for id, t := range req.Tensors {
		s.ids[t.Name] = id
	}
	if err := s.remap(); err != nil {
		sup.Close(ctx)
		return nil, err
	}
	s.restarts = 0
	return s, nil
}

// openRequest describes f to a stager, its routed experts as o.Experts
// says.
func (o StageOptions) openRequest(f *gguf.File) (*plugin.OpenRequest, error) {
	if o.Experts == nil {
		return ggufreq.OpenRequest(f)
	}
	return ggufreq.OpenRequestWith(f, o.Experts)
}

// dropCached asks the kernel to drop the shards' cached pages. Parsing
// the header read through the page cache, with readahead into the tensor
// data; those pages belong to no stager's accounting, yet count against
// the memory budget (and a cgroup's limit). Pages mapped elsewhere stay.
func dropCached(paths []string) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue // the stager's open reports it
		}
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
}

// Mode is the stager's description of itself for the mode line.
func (s *Staged) Mode() string { return s.mode }

// Options are the options the stager was opened with: every one it
// declares, checked, defaults filled in.
func (s *Staged) Options() map[string]string { return s.options }

// Supervisor is the stager's supervisor (tests kill its process).
func (s *Staged) Supervisor() *host.Supervisor { return s.sup }

// Tensor implements model.Weights.
func (s *Staged) Tensor(name string) (gguf.TensorInfo, bool) { return s.f.Tensor(name) }

// TensorData implements model.Weights: the pinned bytes of an
// always-needed tensor, nothing for a routed one.
func (s *Staged) TensorData(t gguf.TensorInfo) ([]byte, error) {
	id, ok := s.ids[t.Name]
	if !ok {
		return nil, fmt.Errorf("staged weights: no tensor %q", t.Name)
	}
	if s.req.Tensors[id].Routed() {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resident[id], nil
}

// Routed implements moe.ExpertSource.
func (s *Staged) Routed(name string) bool {
	id, ok := s.ids[name]
	return ok && s.req.Tensors[id].Routed()
}

// MaxExperts implements moe.ExpertSource: three quarters of the expert units
// the stager's part holds beside the always-needed tensors, sized as the
// stager lays them out (StageOptions.Footprint), so that the next group's
// reads still find room. OpenStaged made sure that one unit fits.
func (s *Staged) MaxExperts(layer int) int {
	return groupSize(s.budget.Stager-s.budget.Resident, s.budget.Unit)
}

// Budget is how the memory budget divided between the core and the
// stager.
func (s *Staged) Budget() Budget { return s.budget }

// Lookahead implements moe.ExpertSource.
func (s *Staged) Lookahead() int { return s.lookahead }

// FixedLookahead implements moe.FixedLookahead.
func (s *Staged) FixedLookahead() bool { return s.fixed }

// OnRemap implements moe.ExpertSource.
func (s *Staged) OnRemap(fn func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRemap = append(s.onRemap, fn)
}

// remap maps the current process's regions, pins the always-needed
// tensors in them and moves the model over before the old mappings go.
func (s *Staged) remap() error {
	for attempt := 0; ; attempt++ {
		err := s.remapOnce()
		if errors.Is(err, host.ErrRestarted) && attempt < 3 {
			continue
		}
		return err
	}
}

func (s *Staged) remapOnce() error {
	gen := s.sup.Generation()
	views, err := plugin.MapRegions(s.sup.Regions())
	if err != nil {
		return err
	}
	req := &plugin.AcquireRequest{Step: residentStep}
	for id, t := range s.req.Tensors {
		if !t.Routed() {
			req.Slices = append(req.Slices, plugin.Slice{Tensor: id})
		}
	}
	resp, err := s.sup.Acquire(s.ctx, req)
	if err != nil {
		views.Close()
		return fmt.Errorf("stager: acquire always-needed tensors: %w", err)
	}
	resident := make(map[int][]byte, len(req.Slices))
	var spans [][]byte
	regions := s.sup.Regions()
	for i, sl := range req.Slices {
		loc := resp.Locations[i]
		var b []byte
		if loc.Region >= 0 && loc.Region < len(regions) && regions[loc.Region].Kind == plugin.RegionShard {
			var span []byte
			if b, span, err = mapSpan(regions[loc.Region].Path, loc); span != nil {
				spans = append(spans, span)
			}
		} else {
			b, err = views.Bytes(loc)
		}
		if err != nil {
			views.Close()
			unmapAll(spans)
			return fmt.Errorf("stager: tensor %q: %w", s.req.Tensors[sl.Tensor].Name, err)
		}
		resident[sl.Tensor] = b
	}
	s.mu.Lock()
	old, oldSpans := s.views, s.spans
	s.views, s.resident, s.spans, s.gen = views, resident, spans, gen
	hooks := s.onRemap
	s.restarts++
	s.predicted = map[int][]int32{}
	s.mu.Unlock()
	var errs []error
	for _, fn := range hooks {
		errs = append(errs, fn())
	}
	if old != nil {
		old.Close()
	}
	unmapAll(oldSpans)
	// Nothing here reads the dead process's files any more, and the
	// kernels now resolve weights to the new ones (the hooks).
	s.sup.ReleaseStale()
	return errors.Join(errs...)
}

// mapSpan maps the pages of one always-needed tensor in a shard file on
// their own. A fault maps the cached pages around it too (fault-around),
// but never beyond its mapping: through a mapping of the whole file, the
// pinned tensors' faults would keep neighbouring expert pages mapped, and a
// stager could not drop them from the page cache when it evicts.
func mapSpan(path string, loc plugin.Location) (data, span []byte, err error) {
	page := int64(os.Getpagesize())
	start := loc.Offset &^ (page - 1)
	end := (loc.Offset + loc.Size + page - 1) &^ (page - 1)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if loc.Offset < 0 || loc.Size <= 0 || loc.Offset+loc.Size > st.Size() {
		return nil, nil, fmt.Errorf("location [%d,+%d) outside %s (%d bytes)", loc.Offset, loc.Size, path, st.Size())
	}
	span, err = unix.Mmap(int(f.Fd()), start, int(end-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s [%d,%d): %w", path, start, end, err)
	}
	_ = unix.Madvise(span, unix.MADV_RANDOM)
	in := loc.Offset - start
	return span[in : in+loc.Size : in+loc.Size], span, nil
}

func unmapAll(spans [][]byte) {
	for _, m := range spans {
		_ = unix.Munmap(m)
	}
}

// retry runs a stager call of the forward pass. When the process was
// restarted, under this call or before it (by another call, or in the
// background after a failed restart), it first re-maps (and re-pins the
// always-needed tensors) and runs the call again. The call is the whole of
// what a retry repeats: the model's state is not touched by the stager, so
// the step goes on from where it was.
func (s *Staged) retry(what string, call func() error) error {
	for attempt := 0; ; attempt++ {
		if s.sup.Generation() != s.mappedGen() {
			if err := s.remap(); err != nil {
				return fmt.Errorf("stager: %s: after a restart: %w", what, err)
			}
		}
		err := call()
		if err == nil && s.sup.Generation() != s.mappedGen() {
			// Another caller (a /metrics scrape) restarted it just before
			// this call: the answer may name the new process's regions.
			err = host.ErrRestarted
		}
		if !errors.Is(err, host.ErrRestarted) {
			return err
		}
		if attempt >= 3 {
			return fmt.Errorf("stager: %s: %w", what, err)
		}
		if err := s.remap(); err != nil {
			return fmt.Errorf("stager: %s: after a restart: %w", what, err)
		}
	}
}

func (s *Staged) mappedGen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// HintExperts implements moe.ExpertSource. A current hint of a layer that was
// predicted scores the prediction.
func (s *Staged) HintExperts(layer int, experts []int32, speculative bool) error {
	s.mu.Lock()
	if speculative {
		s.predicted[layer] = append([]int32(nil), experts...)
	} else if pred, ok := s.predicted[layer]; ok {
		delete(s.predicted, layer)
		s.nPredicted += uint64(len(pred))
		s.nRight += uint64(intersect(pred, experts))
	}
	s.mu.Unlock()
	// A layer whose experts do not fit together is acquired in groups;
	// the model hints each group before it needs it.
	if max := s.MaxExperts(layer); len(experts) > max {
		experts = experts[:max]
	}
	req := &plugin.HintRequest{Layer: layer, Experts: ints(experts), Speculative: speculative}
	return s.retry(fmt.Sprintf("hint layer %d", layer), func() error { return s.sup.Hint(s.ctx, req) })
}

// AcquireExperts implements moe.ExpertSource.
func (s *Staged) AcquireExperts(layer int, tensors []string, experts []int32) (moe.ExpertSet, error) {
	set, _, err := s.acquire(layer, tensors, experts, -1)
	return set, err
}

// AcquireReady implements moe.ReadySource with a Partial acquire: the
// stager waits for experts[:wait] and pins the rest only where resident.
// A stager that ignores Partial answers with every expert, which is
// correct too.
func (s *Staged) AcquireReady(layer int, tensors []string, experts []int32, wait int) (moe.ExpertSet, []int, error) {
	return s.acquire(layer, tensors, experts, wait)
}

// acquire acquires the experts' slices of the tensors; wait < 0 waits for
// all, else for experts[:wait] and what is resident of the others. It
// returns the set of the ready experts and their indexes into experts.
func (s *Staged) acquire(layer int, tensors []string, experts []int32, wait int) (moe.ExpertSet, []int, error) {
	ids := make([]int, len(tensors))
	for i, name := range tensors {
		id, ok := s.ids[name]
		if !ok || !s.req.Tensors[id].Routed() {
			return nil, nil, fmt.Errorf("stager: %q is not a routed tensor", name)
		}
		ids[i] = id
	}
	s.mu.Lock()
	s.step++
	step := s.step
	s.mu.Unlock()
	// Expert-major, so that a partial request's waited slices come first.
	nt := len(ids)
	req := &plugin.AcquireRequest{Step: step, Partial: wait >= 0, Wait: max(wait, 0) * nt}
	for _, e := range experts {
		for _, id := range ids {
			req.Slices = append(req.Slices, plugin.Slice{Tensor: id, Expert: int(e)})
		}
	}
	start := time.Now()
	var resp *plugin.AcquireResponse
	err := s.retry(fmt.Sprintf("acquire layer %d", layer), func() (err error) {
		resp, err = s.sup.Acquire(s.ctx, req)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	pending := make([]bool, len(experts))
	for _, i := range resp.Pending {
		if i < 0 || i >= len(req.Slices) || i < req.Wait {
			_ = s.sup.Release(s.ctx, &plugin.ReleaseRequest{Step: step})
			return nil, nil, fmt.Errorf("stager: acquire layer %d: slice %d of %d (%d waited for) reported pending", layer, i, len(req.Slices), req.Wait)
		}
		pending[i/nt] = true
	}
	var ready []int
	for i, p := range pending {
		if !p {
			ready = append(ready, i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.acquireTime += now.Sub(start)
	s.acquires++
	s.layerTime(layer).Acquire += now.Sub(start)
	n := len(ready)
	set := &expertSet{s: s, step: step, n: n, locs: make([]plugin.Location, 0, n*nt), data: make([][]byte, n*nt), layer: layer, since: now}
	for j, i := range ready {
		for t := range nt {
			k := i*nt + t
			set.locs = append(set.locs, resp.Locations[k])
			if set.data[t*n+j], err = s.views.Bytes(resp.Locations[k]); err != nil {
				return nil, nil, fmt.Errorf("stager: layer %d expert %d of %q: %w", layer, req.Slices[k].Expert, s.req.Tensors[req.Slices[k].Tensor].Name, err)
			}
		}
	}
	return set, ready, nil
}

// layerTime returns layer's counters, growing the table; s.mu is held.
func (s *Staged) layerTime(layer int) *LayerTime {
	if layer >= len(s.layers) {
		s.layers = append(s.layers, make([]LayerTime, layer+1-len(s.layers))...)
	}
	return &s.layers[layer]
}

// LayerTime is one layer's share of the routed experts' time: Acquire is
// the forward pass's wait in AcquireExperts (storage reads not yet done
// plus the stager's round trip), Compute the time the acquired experts
// stayed pinned, which is their matrix products.
type LayerTime struct {
	Acquire, Compute time.Duration
}

// expertSet is the pinned bytes of one layer's acquired experts.
type expertSet struct {
	s     *Staged
	step  uint64
	n     int
	locs  []plugin.Location
	data  [][]byte
	layer int
	since time.Time // when Acquire returned it
}

// Bytes is expert i (in the order asked for) of tensor t (likewise).
func (x *expertSet) Bytes(t, i int) []byte { return x.data[t*x.n+i] }

// Release unpins the set; its bytes must not be used afterwards.
func (x *expertSet) Release() error {
	s := x.s
	s.mu.Lock()
	s.layerTime(x.layer).Compute += time.Since(x.since)
	// Shard pages this process maps stay cached whatever the stager does.
	s.views.Forget(x.locs)
	s.mu.Unlock()
	x.data = nil
	req := &plugin.ReleaseRequest{Step: x.step}
	return s.retry("release", func() error { return s.sup.Release(s.ctx, req) })
}

// StageStats are the stager's counters with the core's own.
type StageStats struct {
	plugin.Stats
	// Restarts counts stager restarts survived.
	Restarts int
	// Predicted counts experts hinted speculatively that were later scored;
	// PredictedRight those among them the router then chose.
	Predicted, PredictedRight uint64
	// Acquires and AcquireTime are the expert acquisitions and the wall
	// time the forward pass spent in them (storage waits plus IPC).
	Acquires    uint64
	AcquireTime time.Duration
	// Layers splits the routed experts' time by layer (index = block).
	Layers []LayerTime
}

// Precision is the share of speculatively hinted experts that were used.
func (st StageStats) Precision() float64 {
	if st.Predicted == 0 {
		return 0
	}
	return float64(st.PredictedRight) / float64(st.Predicted)
}

// Stats reports the stager's counters and the core's. It may run beside
// a forward pass (/metrics), so it never re-maps: after a restart it asks
// the new process, and the forward pass re-maps at its next stager call.
func (s *Staged) Stats() (StageStats, error) {
	var ps *plugin.Stats
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if ps, err = s.sup.Stats(s.ctx); !errors.Is(err, host.ErrRestarted) {
			break
		}
	}
	if err != nil {
		return StageStats{}, fmt.Errorf("stager: stats: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return StageStats{Stats: *ps, Restarts: s.sup.Restarts(), Predicted: s.nPredicted,
		PredictedRight: s.nRight, Acquires: s.acquires, AcquireTime: s.acquireTime, Layers: slices.Clone(s.layers)}, nil
}

// Close closes the stager and unmaps its regions. The model must not run
// afterwards.
func (s *Staged) Close() error {
	err := s.sup.Close(s.ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.views != nil {
		s.views.Close()
		s.views = nil
	}
	unmapAll(s.spans)
	s.spans = nil
	return err
}

func ints(xs []int32) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// intersect counts the values of a that occur in b.
func intersect(a, b []int32) int {
	bs := append([]int32(nil), b...)
	sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
	n := 0
	for _, v := range a {
		i := sort.Search(len(bs), func(i int) bool { return bs[i] >= v })
		if i < len(bs) && bs[i] == v {
			n++
		}
	}
	return n
}
