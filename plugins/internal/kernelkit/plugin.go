package kernelkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/quant"
	"golang.org/x/sys/unix"
)

// OpMatMul is the core's ops.OpMatMul (plugins may not import core/ops),
// read as a plugin.MatMul: Transient drops the weight's shard pages from
// this process's mappings after the batch; FastFloat runs F32/F16/BF16
// weights in float mode fast.
const OpMatMul = plugin.MatMulOp

// LevelEnv names the environment variable that forces an instruction-set
// level (see Levels) in a kernels process, so tests and users can run a
// path the CPU would not pick by default.
const LevelEnv = "K3_KERNELS_LEVEL"

// Plugin implements plugin.Kernels over the arena with its Kit's MatMul. It keeps only mappings between batches (the arena and each weight
// region, by path), so a restarted process re-issues a batch unchanged.
type Plugin struct {
	kit *Kit
	err error // from forcing a level; reported by every call

	mu      sync.Mutex
	arenas  map[string]*plugin.Arena
	regions map[string]*mapped
	// checked holds the regions whose file was checked against its mapping
	// in the current Execute: once per batch, not once per product.
	checked map[string]*mapped
	acts    []byte // quantized activations of a batch's ops, reused between batches
	actOff  int    // what the current batch uses of acts
}

// NewPlugin returns the kernels plugin over k, switched to the level
// LevelEnv names if it is set, else on k's level (the best one this CPU
// runs unless changed).
func (k *Kit) NewPlugin() *Plugin {
	p := &Plugin{kit: k, arenas: map[string]*plugin.Arena{}, regions: map[string]*mapped{}}
	if l := os.Getenv(LevelEnv); l != "" {
		p.err = k.SetLevel(l)
	}
	return p
}

// Describe implements plugin.Kernels.
func (p *Plugin) Describe(ctx context.Context) (*plugin.KernelsInfo, error) {
	if p.err != nil {
		return nil, p.err
	}
	return &plugin.KernelsInfo{
		Name: strings.TrimPrefix(p.kit.name, "kernels") + " (" + p.kit.Level() + ")",
		Ops:  []plugin.OpSupport{{Op: OpMatMul, Types: Types()}},
		Options: []plugin.OptionSpec{{Name: "float", Type: plugin.OptionString, Default: "exact", Values: []string{"exact", "fast"},
			Doc: "F32/F16/BF16 products: exact (the reference bit for bit) or fast (float32 sums flushed to float64 every 64 elements)"}},
	}, nil
}

// Execute implements plugin.Kernels: the ops run in order, each across
// req.Threads goroutines.
func (p *Plugin) Execute(ctx context.Context, req *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	start := time.Now()
	if p.err != nil {
		return nil, p.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = map[string]*mapped{}
	a, err := p.arena(req.Arena)
	if err != nil {
		return nil, err
	}
	if req.Threads <= 0 {
		r := *req
		r.Threads = runtime.NumCPU()
		req = &r
	}
	var cache actCache
	p.actOff = 0
	var rows []int
	var runs []func(r0, r1 int)
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	// Transient weights in shard files are forgotten after the batch, even
	// a failed one, so that this process's mapping does not keep them in
	// the page cache once the stager evicts them.
	forget := map[*mapped][]plugin.Location{}
	defer func() {
		for m, locs := range forget {
			m.views.Forget(locs)
		}
	}()
	for i := range req.Ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		op := &req.Ops[i]
		if op.Name != OpMatMul {
			return nil, fmt.Errorf("%s: op %d: %q is not an op this plugin advertises", p.kit.name, i, op.Name)
		}
		r, run, release, err := p.matMul(a, req, op, &cache, forget)
		if err != nil {
			return nil, fmt.Errorf("%s: op %d (%s): %w", p.kit.name, i, op.Name, err)
		}
		rows, runs, releases = append(rows, r), append(runs, run), append(releases, release)
	}
	// The batch's products are independent (the contract): all of them
	// share one parallel loop.
	parallelPlans(rows, runs, req.Threads)
	return &plugin.ExecuteResponse{Elapsed: time.Since(start)}, nil
}

// actCache remembers the activations quantized last, so that products of
// one input (q, k and v; an expert's gate and up) convert it once.
type actCache struct {
	in   plugin.ArenaRef
	vt   quant.Type
	n    int
	data []byte
}

// matMul checks one product of a batch and quantizes its activations; it
// returns the product's weight rows, the function that computes a range of
// them, and what to call when the batch is done.
func (p *Plugin) matMul(a *plugin.Arena, req *plugin.ExecuteRequest, op *plugin.Op, cache *actCache, forget map[*mapped][]plugin.Location) (int, func(r0, r1 int), func(), error) {
	mm, err := op.MatMul()
	if err != nil {
		return 0, nil, nil, err
	}
	w := mm.Weight
	if w.Shape[0] > 1<<31 || w.Shape[1] > 1<<31 {
		return 0, nil, nil, fmt.Errorf("weight shape %v is not a matrix", w.Shape)
	}
	cols, rows, n := int(w.Shape[0]), int(w.Shape[1]), int64(mm.Rows)
	if n > 1<<24 {
		return 0, nil, nil, fmt.Errorf("%d activation rows", n)
	}
	rb, err := quant.RowSize(w.Type, int64(cols))
	if err != nil {
		return 0, nil, nil, err
	}
	wb, m, err := p.weight(req.Regions, w, rb*int64(rows))
	if err != nil {
		return 0, nil, nil, err
	}
	if mm.Transient && req.Regions[w.Region].Kind == plugin.RegionShard {
		forget[m] = append(forget[m], plugin.Location{Region: 0, Offset: w.Offset, Size: rb * int64(rows)})
	}
	in, out := mm.Input, mm.Output
	if in.Size < n*int64(cols)*4 || out.Size < n*int64(rows)*4 {
		return 0, nil, nil, fmt.Errorf("arena input of %d bytes, output of %d for %d rows of %dx%d", in.Size, out.Size, n, rows, cols)
	}
	if err := errors.Join(a.Check(in), a.Check(out)); err != nil {
		return 0, nil, nil, err
	}
	if in.Offset < out.Offset+out.Size && out.Offset < in.Offset+in.Size {
		return 0, nil, nil, errors.New("input and output overlap")
	}
	x := f32(a.Bytes(in))[:int(n)*cols]
	y := f32(a.Bytes(out))[:int(n)*rows]
	act, err := p.quantize(cache, in, w.Type, x, int(n), cols, req.Threads)
	if err != nil {
		return 0, nil, nil, err
	}
	run, release, err := p.kit.matMulPlan(w.Type, wb, rows, cols, act, int(n), y, mm.FastFloat)
	if err != nil {
		return 0, nil, nil, err
	}
	if cache.in.Offset < out.Offset+out.Size && out.Offset < cache.in.Offset+cache.in.Size {
		cache.in = plugin.ArenaRef{} // the cached input will be overwritten
	}
	return rows, run, release, nil
}

// quantize converts n rows of x to t's vec-dot type, reusing the last
// conversion when it was of the same input.
func (p *Plugin) quantize(cache *actCache, in plugin.ArenaRef, t quant.Type, x []float32, n, cols, threads int) ([]byte, error) {
	vt := t.VecDotType()
	rs, err := quant.RowSize(vt, int64(cols))
	if err != nil {
		return nil, err
	}
	size := n * int(rs)
	if cache.in == in && cache.vt == vt && cache.n == n && in.Size > 0 {
		return cache.data[:size], nil
	}
	if vt == quant.F32 {
		// The kernels read F32 activations as their bytes.
		b := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), size)
		*cache = actCache{}
		return b, nil
	}
	// Each op of a batch keeps its own activations until the batch runs.
	if cap(p.acts)-p.actOff < size {
		p.acts = make([]byte, max(size, 2*cap(p.acts)))
		p.actOff = 0
	}
	buf := p.acts[p.actOff : p.actOff+size : p.actOff+size]
	p.actOff += size
	errs := make([]error, n)
	parallelRows(n, min(threads, n), func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			errs[r] = p.kit.QuantizeActivation(t, x[r*cols:(r+1)*cols], buf[r*int(rs):(r+1)*int(rs)])
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	*cache = actCache{in: in, vt: vt, n: n, data: buf}
	return buf, nil
}

// arena maps the arena at path once.
func (p *Plugin) arena(path string) (*plugin.Arena, error) {
	if a, ok := p.arenas[path]; ok {
		return a, nil
	}
	a, err := plugin.OpenArena(path)
	if err != nil {
		return nil, err
	}
	p.arenas[path] = a
	return a, nil
}

// mapped is a region file as this process mapped it. A file replaced
// under the same path (a restarted stager's slots) or grown since is
// mapped again.
type mapped struct {
	views *plugin.Views
	ino   uint64
	size  int64
}

// weight resolves w to size bytes of its region, mapping the region once
// per file, and returns the mapping too (its views have the one region, 0).
func (p *Plugin) weight(regions []plugin.Region, w plugin.WeightRef, size int64) ([]byte, *mapped, error) {
	if w.Region < 0 || w.Region >= len(regions) {
		return nil, nil, fmt.Errorf("weight region %d of %d", w.Region, len(regions))
	}
	r := regions[w.Region]
	if m, ok := p.checked[r.Path]; ok {
		b, err := m.views.Bytes(plugin.Location{Region: 0, Offset: w.Offset, Size: size})
		return b, m, err
	}
	var st unix.Stat_t
	if err := unix.Stat(r.Path, &st); err != nil {
		return nil, nil, fmt.Errorf("region %s: %w", r.Path, err)
	}
	m, ok := p.regions[r.Path]
	if !ok {
		p.dropGone()
	}
	if !ok || m.ino != st.Ino || m.size != st.Size {
		if ok {
			m.views.Close()
			delete(p.regions, r.Path)
		}
		v, err := plugin.MapRegions([]plugin.Region{r})
		if err != nil {
			return nil, nil, err
		}
		m = &mapped{views: v, ino: st.Ino, size: st.Size}
		p.regions[r.Path] = m
	}
	p.checked[r.Path] = m
	b, err := m.views.Bytes(plugin.Location{Region: 0, Offset: w.Offset, Size: size})
	return b, m, err
}

// dropGone unmaps the regions whose file was removed or replaced, unless
// the batch under way uses them. A new region shows up when a stager
// restarted (its new slot files); the dead one's files are removed once the
// host re-mapped, and a mapping kept here would hold their memory.
func (p *Plugin) dropGone() {
	for path, m := range p.regions {
		if _, inBatch := p.checked[path]; inBatch {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil || st.Ino != m.ino {
			m.views.Close()
			delete(p.regions, path)
		}
	}
}

// f32 views arena bytes as float32s; arena refs are 64-byte aligned.
func f32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
