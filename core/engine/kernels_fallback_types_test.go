package engine_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
)

// requantized writes the tiny model with every quantized tensor whose rows
// fit typ's blocks re-encoded as typ (dequantized, then quantized with the
// reference), and returns its path and how many tensors changed type.
func requantized(t *testing.T, typ quant.Type) (string, int) {
	t.Helper()
	src, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var specs []gguf.TensorSpec
	var data [][]byte
	changed := 0
	for _, ti := range src.Tensors() {
		b, err := src.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		spec := gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape}
		tr, _ := ti.Type.Traits()
		if tr.Quantized && ti.Type != typ && len(ti.Shape) >= 2 && ti.Shape[0]%int64(typ.BlockSize()) == 0 {
			n := 1
			for _, d := range ti.Shape {
				n *= int(d)
			}
			x := make([]float32, n)
			if err := quant.Dequantize(ti.Type, b, x); err != nil {
				t.Fatal(err)
			}
			size, err := quant.RowSize(typ, int64(n))
			if err != nil {
				t.Fatal(err)
			}
			b = make([]byte, size)
			if err := quant.Quantize(typ, x, b); err != nil {
				t.Fatal(err)
			}
			spec.Type = typ
			changed++
		}
		specs = append(specs, spec)
		data = append(data, b)
	}
	path := filepath.Join(t.TempDir(), typ.String()+".gguf")
	w, err := gguf.Create(path, src.KVs(), specs, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if err := w.WriteTensor(s.Name, data[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, changed
}

// TestKernelsFallbackTypes loads the tiny model re-encoded in each of the
// types below and runs it on a backend that has none of them (F32
// products only): every product of those types runs on the core's
// reference, and the logits are finite and the reference's bit for bit.
func TestKernelsFallbackTypes(t *testing.T) {
	host.RegisterKernels("test-f32-only-types", func() plugin.Kernels { return f32Kernels{} })
	for _, typ := range []quant.Type{quant.IQ4_NL, quant.IQ4_XS, quant.Q4_1, quant.Q5_1, quant.TQ1_0, quant.TQ2_0,
		quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S, quant.IQ1_M} {
		t.Run(typ.String(), func(t *testing.T) {
			path, changed := requantized(t, typ)
			if changed == 0 {
				t.Fatalf("no tensor of the tiny model fits %s's blocks", typ)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			k, err := engine.StartKernels(context.Background(), host.Launch{Name: "test-f32-only-types", InProcess: true},
				engine.KernelsOptions{ArenaSize: 16 << 20})
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
				if math.IsNaN(float64(want[i])) || math.IsInf(float64(want[i]), 0) {
					t.Fatalf("logit %d is %g", i, want[i])
				}
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("logit %d: %g, want %g", i, got[i], want[i])
				}
			}
			s := k.Stats()
			if s.Fallbacks == 0 {
				t.Errorf("no product ran on the reference")
			}
			t.Logf("%d tensors as %s; %d F32 products on the backend, %d on the reference", changed, typ, s.Ops, s.Fallbacks)
		})
	}
}
