package kimik3_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/model"
	_ "github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/model/modeltest"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// The shared test steps (core/model/modeltest).
var (
	writeModel  = modeltest.WriteSynth
	loadOpts    = modeltest.Load
	prompt      = modeltest.Prompt
	batchLogits = modeltest.BatchLogits
	maxAbs      = modeltest.MaxAbs
)

// small is the tiny preset cut down further so that a test file is a few
// hundred kB and llama.cpp evaluates it in milliseconds.
func small() synth.Config {
	c, _ := synth.Preset("tiny")
	c.NVocab = 512
	return c
}

func load(t testing.TB, path string, threads int) model.Model {
	t.Helper()
	return loadOpts(t, path, model.Options{Threads: threads})
}

func TestParityF32(t *testing.T) {
	ref := parity.Require(t)
	base := small()
	tests := []struct {
		name string
		mod  func(*synth.Config)
	}{
		// latent MoE, q LoRA, attn-res blocks of 2, one shared expert, one
		// dense layer, lower-bound gate, weight norm, KDA = MLA
		{"tiny", func(c *synth.Config) {}},
		{"plain", func(c *synth.Config) {
			c.NLatent, c.QLoRA, c.AttnResBlock, c.NExpertShared = 0, 0, 0, 0
			c.GateLowerBound, c.ExpWeightsNorm = 0, false
		}},
		{"kda-heavy", func(c *synth.Config) {
			c.NLayer, c.MLALayers, c.NDense = 5, []int{2}, 2
			c.AttnResBlock, c.NExpertShared = 1, 2
		}},
		{"mla-heavy", func(c *synth.Config) {
			c.MLALayers, c.AttnResBlock, c.GatingFunc, c.ExpWeightsScale = []int{0, 1, 3}, 3, 1, 1
			c.RoutedNorm, c.GateLowerBound = false, 0
		}},
		{"situ-lb0", func(c *synth.Config) {
			c.SituLinearBeta, c.GateLowerBound, c.NExpertUsed, c.MLAGate = 0, -3, 3, false
		}},
		// Kimi K3's per-head sizes (KDA head 128, latent 512, qk 128+64,
		// v 128) on a narrow model
		{"k3-heads", func(c *synth.Config) {
			c.NEmbd, c.NHead, c.KDAHead, c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 512, 4, 128, 256, 512, 128, 64, 128
			c.NLatent, c.NFFExp, c.NFF = 256, 256, 512
		}},
		{"res-wide", func(c *synth.Config) {
			c.NLayer, c.AttnResBlock, c.QLoRA, c.NLatent, c.ExpWeightsNorm = 6, 4, 0, 0, false
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			path := writeModel(t, c)
			m := load(t, path, 2)
			for _, n := range []int{1, 7, 70} {
				toks := prompt(n, c.NVocab)
				got := batchLogits(t, m, toks, 512)
				for _, cpu := range []string{"native", "generic"} {
					want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: cpu})
					if err != nil {
						t.Fatal(err)
					}
					d, at := maxAbs(want, got)
					t.Logf("%s n=%d vs %s: max|Δlogit| = %.3g (at pos %d)", tc.name, n, cpu, d, at)
					// k3 reproduces the scalar build operation for operation
					// (softplus's logf is the one libm call it does not copy);
					// the SIMD build sums in other orders.
					tol := map[string]float64{"native": 1e-3, "generic": 1e-4}[cpu]
					if d > tol {
						t.Errorf("%s n=%d vs %s: max|Δlogit| %.3g > %g at position %d", tc.name, n, cpu, d, tol, at)
					}
				}
			}
		})
	}
}

// TestParityQuantized holds k3 to llama.cpp's scalar CPU code (the
// "generic" variant), which it reproduces operation for operation, and
// logs how far the SIMD variant ("native") is from both: ggml's SIMD kernels
// sum in another order, and on quantized activations a last-bit difference
// can flip a rounding or an expert choice.
func TestParityQuantized(t *testing.T) {
	if testing.Short() {
		t.Skip("quantized parity takes about a minute; skipped with -short")
	}
	ref := parity.Require(t)
	k3heads := func(c *synth.Config) {
		c.NEmbd, c.NHead, c.KDAHead, c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 512, 4, 128, 256, 512, 128, 64, 128
		c.NLatent, c.NFFExp, c.NFF = 256, 256, 512
	}
	for _, tc := range []struct {
		typ   synth.OutType
		shape func(*synth.Config)
	}{
		{synth.TypeQ8_0, nil}, {synth.TypeQ4_K_M, nil}, {synth.TypeQ2_K, nil}, {synth.TypeF16, nil},
		{synth.TypeQ2_K, k3heads},
	} {
		typ := tc.typ
		name := typ.String()
		if tc.shape != nil {
			name += "-k3heads"
		}
		t.Run(name, func(t *testing.T) {
			c := small()
			c.Type = typ
			if tc.shape != nil {
				tc.shape(&c)
			}
			path := writeModel(t, c)
			m := load(t, path, 2)
			toks := prompt(70, c.NVocab)
			got := batchLogits(t, m, toks, 512)
			for _, cpu := range []string{"generic", "native"} {
				want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: cpu})
				if err != nil {
					t.Fatal(err)
				}
				d, at := maxAbs(want, got)
				t.Logf("%s n=70 vs %s: max|Δlogit| = %.3g (at pos %d)", typ, cpu, d, at)
				if cpu == "generic" && d > 1e-4 {
					t.Errorf("%s vs generic: max|Δlogit| %.3g at position %d", typ, d, at)
				}
			}

			short := toks[:9]
			r := engine.NewRunner(m, engine.Batch, 0)
			last, err := r.Prefill(short, false)
			if err != nil {
				t.Fatal(err)
			}
			gotG, err := r.Greedy(last, 32)
			if err != nil {
				t.Fatal(err)
			}
			for _, cpu := range []string{"generic", "native"} {
				wantG, err := ref.GreedyOpts(path, short, 32, parity.LogitsOptions{Threads: 2, CPU: cpu})
				if err != nil {
					t.Fatal(err)
				}
				same := 0
				for same < len(wantG) && wantG[same] == gotG[same] {
					same++
				}
				t.Logf("%s greedy 32 vs %s: first %d of %d tokens equal", typ, cpu, same, len(wantG))
				if cpu == "generic" && same != len(wantG) {
					t.Errorf("greedy 32 vs generic (-llama.cpp +k3):\n%s", cmp.Diff(wantG, gotG[:len(wantG)]))
				}
			}
		})
	}
}

// TestBatchVsStep compares a prompt evaluated as one batch with the same
// prompt fed one token at a time. Below 64 tokens both use the same
// kernels and agree bit for bit; from 64 on, the batch's attention runs
// ggml's tiled float32 kernel while steps run the half-precision one, as in
// llama.cpp, so they agree only to rounding.
func TestBatchVsStep(t *testing.T) {
	c := small()
	path := writeModel(t, c)
	m := load(t, path, 2)
	for _, tc := range []struct {
		n   int
		tol float64
	}{{7, 0}, {70, 1e-2}} {
		toks := prompt(tc.n, c.NVocab)
		batch := batchLogits(t, m, toks, 512)
		step := batchLogits(t, m, toks, 1)
		d, at := maxAbs(batch, step)
		t.Logf("n=%d: batch vs step max|Δlogit| = %.3g (at pos %d)", tc.n, d, at)
		if ref, err := parity.Find(); err == nil {
			o := parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"}
			lb, err1 := ref.Logits(path, toks, o)
			o.Batch = 1
			l1, err2 := ref.Logits(path, toks, o)
			if err1 == nil && err2 == nil {
				dl, _ := maxAbs(lb, l1)
				ds, _ := maxAbs(step, l1)
				t.Logf("n=%d: llama.cpp's own batch vs ubatch 1: %.3g; k3 step vs llama.cpp ubatch 1: %.3g", tc.n, dl, ds)
			}
		}
		if d > tc.tol {
			t.Errorf("n=%d: batch and step differ by %.3g at position %d", tc.n, d, at)
		}
	}
}

// TestParityLongDecode decodes past 256 cached positions, where llama.cpp
// splits each decode step's attention across its threads.
func TestParityLongDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("decoding 270 tokens on both sides; skipped with -short")
	}
	ref := parity.Require(t)
	c := small()
	c.Type = synth.TypeQ8_0
	path := writeModel(t, c)
	m := load(t, path, 2)
	toks := prompt(270, c.NVocab)
	const n = 24
	want, err := ref.GreedyOpts(path, toks, n, parity.LogitsOptions{Threads: 2, CPU: "generic", IgnoreEOG: true})
	if err != nil {
		t.Fatal(err)
	}
	r := engine.NewRunner(m, engine.Batch, 0)
	r.SetContext(len(toks) + n)
	last, err := r.Prefill(toks, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Greedy(last, n)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("greedy after 270 tokens (-llama.cpp +k3):\n%s", d)
	}

	// the same at the logits: one token per ubatch on both sides
	wantL, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, CPU: "generic", All: true, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	rs := engine.NewRunner(m, engine.Step, 0)
	rs.SetContext(len(toks))
	flat, err := rs.Prefill(toks, true)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Params().Vocab
	gotL := make([][]float32, len(toks))
	for i := range gotL {
		gotL[i] = flat[i*v : (i+1)*v]
	}
	d, at := maxAbs(wantL, gotL)
	t.Logf("270 tokens one at a time vs llama.cpp ubatch 1: max|Δlogit| = %.3g (at pos %d)", d, at)
	if d > 1e-4 {
		t.Errorf("max|Δlogit| %.3g at position %d", d, at)
	}
}

// TestChunkedPrefill runs the KDA layers in the chunkwise form and checks
// it against the token-by-token recurrence.
func TestChunkedPrefill(t *testing.T) {
	c := small()
	c.NLayer, c.MLALayers = 4, []int{3}
	path := writeModel(t, c)
	seq := load(t, path, 2)
	chunked := loadOpts(t, path, model.Options{Threads: 2, DeltaChunk: 16})
	toks := prompt(40, c.NVocab)
	d, at := maxAbs(batchLogits(t, seq, toks, 512), batchLogits(t, chunked, toks, 512))
	t.Logf("chunked vs sequential: max|Δlogit| = %.3g (at pos %d)", d, at)
	if d > 1e-3 {
		t.Errorf("chunked prefill differs by %.3g at position %d", d, at)
	}
}
