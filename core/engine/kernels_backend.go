package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
)

// PluginKernels runs a model's matrix products on a kernels plugin. Weights
// go by reference: a weight's bytes are found in the file mapping they
// belong to (a GGUF shard, a stager's slot file), which the plugin maps
// too. Activations and results go through the arena: buffers a pass took
// from Scratch are there already; any other buffer is copied in or out
// (counted in KernelsStats). Products of types the plugin does not
// advertise, or of weights in no file, run on the core's reference.
type PluginKernels struct {
	name, mode string
	sup        *host.KernelsSupervisor
	arena      *host.Arena
	scratch    int64
	types      map[quant.Type]bool
	files      fileMaps
	fastFloat  bool // plugin.MatMul.FastFloat on F32/F16/BF16 products

	warnScratch sync.Once

	mu       sync.Mutex
	stats    KernelsStats
	followed []*Staged // the stagers Follow tied k to
}

// KernelsStats count what crossed the boundary.
type KernelsStats struct {
	Batches, Ops, Fallbacks int
	// Wall is the time the host spent in Execute calls; Compute the part
	// the plugin reported as its own, so Wall-Compute is the boundary.
	Wall, Compute time.Duration
	// CopiedBytes were copied between Go memory and the arena, in CopyTime.
	CopiedBytes int64
	CopyTime    time.Duration
	Restarts    int
}

// Name implements ops.Backend.
func (k *PluginKernels) Name() string {
	if k.fastFloat {
		return modeName(k.name, k.mode) + ", float fast"
	}
	return modeName(k.name, k.mode)
}

// Supervisor is the plugin's supervisor (tests kill its process).
func (k *PluginKernels) Supervisor() *host.KernelsSupervisor { return k.sup }

// Follow makes k forget where weights were mapped whenever s moves them
// (its stager restarted): a new mapping can take the address of an old
// one, which the table of mappings would otherwise still name.
func (k *PluginKernels) Follow(s *Staged) {
	k.mu.Lock()
	k.followed = append(k.followed, s)
	k.mu.Unlock()
	s.OnRemap(func() error {
		k.files.reset()
		return nil
	})
}

// Follows reports whether Follow tied k to s: whoever assembles a runtime
// of plugin kernels over a stager checks it (core/runtime's tests do).
func (k *PluginKernels) Follows(s *Staged) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.followed, s)
}

// Arena is the shared memory the plugin computes in.
func (k *PluginKernels) Arena() *host.Arena { return k.arena }

// Stats returns the counters so far.
func (k *PluginKernels) Stats() KernelsStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stats
}

// Close stops the plugin and removes the arena.
func (k *PluginKernels) Close() error {
	k.sup.Close()
	return k.arena.Close()
}

// Scratch implements ops.Backend: a slice of the arena for one pass.
func (k *PluginKernels) Scratch() *ops.Scratch {
	r, err := k.arena.Alloc(k.scratch)
	if err != nil {
		k.warnScratch.Do(func() {
			slog.Warn("kernels: no arena scratch for a pass (more concurrent passes than the arena holds); its buffers are copied", "err", err)
		})
		return ops.NewScratch(nil, nil)
	}
	b := k.arena.Bytes(r)
	return ops.NewScratch(unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), func() { k.arena.Free(r) })
}

// staged is a Go buffer copied through the arena for one batch.
type staged struct {
	ref plugin.ArenaRef
	out []float32 // copy back here after the batch (nil for inputs)
}

// batch is one Execute under construction.
type batch struct {
	k       *PluginKernels
	req     plugin.ExecuteRequest
	regions map[string]int
	staged  []staged
	copied  int64
	copyT   time.Duration
}

// MatMuls implements ops.Backend.
func (k *PluginKernels) MatMuls(p *ops.Pool, list []ops.MatMulOp) error {
	b := &batch{k: k, regions: map[string]int{}}
	b.req.Arena, b.req.Threads = k.arena.Path(), p.Threads()
	defer b.free()
	var fallback []ops.MatMulOp
	for i := range list {
		op := &list[i]
		if err := op.Check(); err != nil {
			return err
		}
		if op.N == 0 {
			continue
		}
		pop, ok, err := b.add(op)
		if err != nil {
			return err
		}
		if !ok {
			fallback = append(fallback, *op)
			continue
		}
		b.req.Ops = append(b.req.Ops, pop)
	}
	if len(b.req.Ops) > 0 {
		start := time.Now()
		resp, err := k.execute(context.Background(), &b.req)
		wall := time.Since(start)
		if err != nil {
			return err
		}
		b.copyOut()
		k.mu.Lock()
		k.stats.Batches++
		k.stats.Ops += len(b.req.Ops)
		k.stats.Wall += wall
		k.stats.Compute += resp.Elapsed
		k.mu.Unlock()
	}
	k.mu.Lock()
	k.stats.Fallbacks += len(fallback)
	k.stats.CopiedBytes += b.copied
	k.stats.CopyTime += b.copyT
	k.mu.Unlock()
	return ops.Reference.MatMuls(p, fallback)
}

// add turns op into a plugin op, or reports that it must run here.
func (b *batch) add(op *ops.MatMulOp) (plugin.Op, bool, error) {
	w := op.W
	if !b.k.types[w.Type] || len(w.Data) == 0 {
		return plugin.Op{}, false, nil
	}
	size := int64(w.RowBytes()) * int64(w.Rows)
	path, off, ok := b.k.files.resolve(&w.Data[0], size)
	if !ok {
		return plugin.Op{}, false, nil
	}
	ri, ok := b.regions[path]
	if !ok {
		ri = len(b.req.Regions)
		b.regions[path] = ri
		b.req.Regions = append(b.req.Regions, plugin.Region{Kind: regionKind(path), Path: path})
	}
	in, err := b.arenaRef(op.X[:op.N*w.Cols], false)
	if err != nil {
		return plugin.Op{}, false, err
	}
	out, err := b.arenaRef(op.Out[:op.N*w.Rows], true)
	if err != nil {
		return plugin.Op{}, false, err
	}
	return plugin.MatMul{
		Weight: plugin.WeightRef{Region: ri, Offset: off, Type: w.Type, Shape: []int64{int64(w.Cols), int64(w.Rows)}},
		Input:  in, Output: out, Rows: op.N,
		// Staged for this step: the plugin unmaps it after the batch, or
		// its mapping would keep the pages cached past the stager's
		// eviction.
		Transient: w.Transient,
		FastFloat: b.k.fastFloat && (w.Type == quant.F32 || w.Type == quant.F16 || w.Type == quant.BF16),
	}.Op(), true, nil
}

// arenaRef returns where x is in the arena, copying it there first (and,
// for an output, back after the batch) when it is Go memory.
func (b *batch) arenaRef(x []float32, output bool) (plugin.ArenaRef, error) {
	size := int64(len(x)) * 4
	mem := b.k.arena.Bytes(plugin.ArenaRef{Offset: 0, Size: b.k.arena.Size()})
	base, p := uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&x[0]))
	if p >= base && p+uintptr(size) <= base+uintptr(len(mem)) {
		return plugin.ArenaRef{Offset: int64(p - base), Size: size}, nil
	}
	r, err := b.k.arena.Alloc(size)
	if err != nil {
		return plugin.ArenaRef{}, fmt.Errorf("engine: kernels: staging %d bytes: %w", size, err)
	}
	s := staged{ref: r}
	if output {
		s.out = x
	} else {
		start := time.Now()
		copy(unsafe.Slice((*float32)(unsafe.Pointer(&mem[r.Offset])), len(x)), x)
		b.copied += size
		b.copyT += time.Since(start)
	}
	b.staged = append(b.staged, s)
	return plugin.ArenaRef{Offset: r.Offset, Size: size}, nil
}

func (b *batch) copyOut() {
	start := time.Now()
	for _, s := range b.staged {
		if s.out != nil {
			m := b.k.arena.Bytes(s.ref)
			copy(s.out, unsafe.Slice((*float32)(unsafe.Pointer(&m[0])), len(s.out)))
			b.copied += int64(len(s.out)) * 4
		}
	}
	b.copyT += time.Since(start)
}

func (b *batch) free() {
	for _, s := range b.staged {
		b.k.arena.Free(s.ref)
	}
}
