package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
)

// f32Kernels is a third-party kernels backend in miniature: it advertises
// matmul on F32 weights only and computes it with the core's reference
// ops over the arena and the mapped regions.
type f32Kernels struct{}

func (f32Kernels) Describe(context.Context) (*plugin.KernelsInfo, error) {
	return &plugin.KernelsInfo{Name: "f32-only", Ops: []plugin.OpSupport{{Op: ops.OpMatMul, Types: []quant.Type{quant.F32}}}}, nil
}

func (f32Kernels) Execute(_ context.Context, req *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	start := time.Now()
	a, err := plugin.OpenArena(req.Arena)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	v, err := plugin.MapRegions(req.Regions)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	pool := ops.NewPool(1)
	for _, op := range req.Ops {
		w := op.Weights[0]
		if w.Type != quant.F32 {
			return nil, fmt.Errorf("sent a %s product, which was not advertised", w.Type)
		}
		cols, rows, n := int(w.Shape[0]), int(w.Shape[1]), int(op.Ints[0])
		wb, err := v.Bytes(plugin.Location{Region: w.Region, Offset: w.Offset, Size: int64(rows * cols * 4)})
		if err != nil {
			return nil, err
		}
		x := ops.F32View(a.Bytes(op.Inputs[0]))[:n*cols]
		y := ops.F32View(a.Bytes(op.Outputs[0]))[:n*rows]
		if err := pool.MatMul(ops.Matrix{Type: w.Type, Rows: rows, Cols: cols, Data: wb}, x, n, y); err != nil {
			return nil, err
		}
	}
	return &plugin.ExecuteResponse{Elapsed: time.Since(start)}, nil
}

// TestKernelsFallback runs the tiny Q2_K model on a backend that
// implements only F32 products: those go to it by reference over the
// arena, every quantized one runs on the core's reference, and the logits
// are the reference's bit for bit.
func TestKernelsFallback(t *testing.T) {
	host.RegisterKernels("test-f32-only", func() plugin.Kernels { return f32Kernels{} })
	f, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k, err := engine.StartKernels(context.Background(), host.Launch{Name: "test-f32-only", InProcess: true}, engine.KernelsOptions{ArenaSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	logits := func(b ops.Backend) []float32 {
		m, err := model.Load(f, model.Options{Threads: 2, Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		r := engine.NewRunner(m, engine.Batch, 0)
		r.SetContext(16)
		out, err := r.Prefill([]int32{3, 1, 4, 1, 5, 9, 2, 6}, true)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), out...)
	}
	want, got := logits(nil), logits(k)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("logit %d: %g, want %g", i, got[i], want[i])
		}
	}
	s := k.Stats()
	if s.Ops == 0 || s.Fallbacks == 0 {
		t.Errorf("%d products on the backend, %d on the reference; want both", s.Ops, s.Fallbacks)
	}
	t.Logf("%d F32 products through the backend in %d batches, %d quantized ones on the reference", s.Ops, s.Batches, s.Fallbacks)
}
