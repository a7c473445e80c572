// Command example-kernels is the smallest useful third-party kernels
// plugin: matrix products with F32 weights, in plain Go. It advertises only
// those; the host computes every other op and weight type on its own
// reference kernels, so a plugin can start with the one case it speeds up
// and grow from there.
//
// It is a module of its own, built against the SDK as a third party
// builds it (go.mod's replace directive points at this checkout):
//
//	cd plugins/example-kernels && go build -o example-kernels .
//	# profile: kernels: {name: example, path: ./example-kernels}
package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/quant"
)

func main() {
	plugin.ServeKernels(&kernels{arenas: map[string]*plugin.Arena{}})
}

type kernels struct {
	mu     sync.Mutex
	arenas map[string]*plugin.Arena // mapped once per path
}

// Describe advertises matmul on F32 weights and declares no options, so
// the host refuses a profile that asks for kernels.float fast.
func (k *kernels) Describe(context.Context) (*plugin.KernelsInfo, error) {
	return &plugin.KernelsInfo{Name: "example (pure Go, F32)", Ops: []plugin.OpSupport{{Op: plugin.MatMulOp, Types: []quant.Type{quant.F32}}}}, nil
}

func (k *kernels) Execute(ctx context.Context, req *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	start := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.arenas[req.Arena]
	if !ok {
		var err error
		if a, err = plugin.OpenArena(req.Arena); err != nil {
			return nil, err
		}
		k.arenas[req.Arena] = a
	}
	// Regions are mapped per batch: nothing stays mapped that a stager
	// may evict (the transient flag asks for that), and a restarted
	// plugin needs nothing from before.
	views, err := plugin.MapRegions(req.Regions)
	if err != nil {
		return nil, err
	}
	defer views.Close()
	threads := req.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	for i, op := range req.Ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mm, err := op.MatMul()
		if err == nil {
			err = matMul(a, views, mm, threads)
		}
		if err != nil {
			return nil, fmt.Errorf("example-kernels: op %d (%s): %w", i, op.Name, err)
		}
	}
	return &plugin.ExecuteResponse{Elapsed: time.Since(start)}, nil
}

// matMul computes op; Transient needs nothing more (regions are mapped
// per batch) and FastFloat is never set (no "float" option is declared).
func matMul(a *plugin.Arena, views *plugin.Views, op plugin.MatMul, threads int) error {
	w := op.Weight
	if w.Type != quant.F32 {
		return fmt.Errorf("weights of type %s: only F32 is advertised", w.Type)
	}
	cols, rows, n := int(w.Shape[0]), int(w.Shape[1]), op.Rows
	wb, err := views.Bytes(plugin.Location{Region: w.Region, Offset: w.Offset, Size: int64(rows) * int64(cols) * 4})
	if err != nil {
		return err
	}
	for _, r := range []plugin.ArenaRef{op.Input, op.Output} {
		if err := a.Check(r); err != nil {
			return err
		}
	}
	x, y := floats(a.Bytes(op.Input)), floats(a.Bytes(op.Output))
	if len(x) < n*cols || len(y) < n*rows {
		return fmt.Errorf("%d rows of %d and %d floats do not fit %d and %d floats", n, cols, rows, len(x), len(y))
	}
	wf := floats(wb)
	var wg sync.WaitGroup
	per := (rows + threads - 1) / threads
	for lo := 0; lo < rows; lo += per {
		hi := min(lo+per, rows)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := lo; r < hi; r++ {
				wr := wf[r*cols : (r+1)*cols]
				for t := range n {
					y[t*rows+r] = dot(wr, x[t*cols:(t+1)*cols])
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// dot is the reference's F32 dot product (ggml's scalar
// ggml_vec_dot_f32): each product rounded to float32, the sum kept in
// float64. Computing it the same way gives the same bits, so logits match
// the built-in backends exactly.
func dot(w, x []float32) float32 {
	x = x[:len(w)]
	var s float64
	for i, v := range w {
		s += float64(float32(v * x[i]))
	}
	return float32(s)
}

// floats views little-endian float32 bytes in place (arena and GGUF data
// are aligned).
func floats(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
