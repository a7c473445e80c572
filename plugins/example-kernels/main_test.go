package main

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	_ "github.com/k3-inference/k3/core/model/kimik3" // registers the architecture
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/synth"
)

// TestLogitsMatchReference runs a tiny synthetic model's prompt on these
// kernels in-process, the host computing what they do not advertise, and
// checks the logits against the core's reference bit for bit: an F32
// model, every product here (a product off by 1e-6 shows), and a Q2_K
// one, whose quantized products fall back. (cmd/k3's TestThirdPartyPlugins
// runs the built binary through k3 eval.)
func TestLogitsMatchReference(t *testing.T) {
	host.RegisterKernels("example-test", func() plugin.Kernels { return &kernels{arenas: map[string]*plugin.Arena{}} })
	for _, typ := range []synth.OutType{synth.TypeF32, synth.TypeQ2_K} {
		t.Run(typ.String(), func(t *testing.T) { checkLogits(t, typ, typ != synth.TypeF32) })
	}
}

func checkLogits(t *testing.T, typ synth.OutType, fallback bool) {
	cfg, _ := synth.Preset("tiny")
	cfg.Type = typ
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k, err := engine.StartKernels(context.Background(), host.Launch{Name: "example-test", InProcess: true}, engine.KernelsOptions{ArenaSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	logits := func(b engine.Kernels) []float32 {
		o := model.Options{Threads: 2}
		if b != nil {
			o.Backend = b
		}
		m, err := model.Load(f, o)
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
	if s := k.Stats(); s.Ops == 0 || (s.Fallbacks > 0) != fallback {
		t.Errorf("%d products here, %d on the reference", s.Ops, s.Fallbacks)
	}
}
