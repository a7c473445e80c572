package qwen3moe_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/modeltest"
	_ "github.com/k3-inference/k3/core/model/qwen3moe"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// The shared test steps (core/model/modeltest).
var (
	writeModel  = modeltest.WriteSynth
	load        = modeltest.Load
	prompt      = modeltest.Prompt
	batchLogits = modeltest.BatchLogits
	maxAbs      = modeltest.MaxAbs
)

// small is the tiny qwen3moe preset with a 512-token vocabulary, so a test
// file is a few MB and llama.cpp evaluates it in milliseconds.
func small() synth.Config {
	c, err := synth.ArchPreset(synth.ArchQwen3MoE, "tiny")
	if err != nil {
		panic(err)
	}
	c.NVocab = 512
	return c
}

// shapes are the configurations every parity test runs: GQA ratios 4 and
// 1 and 8, rope bases 1e6, 1e4 and 5e5, 16 or 8 experts with 4 or 2 used,
// head sizes 64, 32 and 128.
var shapes = []struct {
	name string
	mod  func(*synth.Config)
}{
	{"tiny-gqa4", func(c *synth.Config) {}},
	{"gqa1-base1e4", func(c *synth.Config) {
		c.NHead, c.NHeadKV, c.RopeBase = 4, 4, 1e4
		c.NExpert, c.NExpertUsed = 8, 2
	}},
	{"gqa8-head32", func(c *synth.Config) {
		c.NHead, c.NHeadKV, c.HeadDim, c.RopeBase = 16, 2, 32, 5e5
		c.NLayer, c.NExpertUsed = 3, 1
	}},
	{"head128", func(c *synth.Config) {
		c.NHead, c.NHeadKV, c.HeadDim, c.NFFExp = 4, 1, 128, 128
		c.NExpert, c.NExpertUsed = 32, 8
	}},
}

// TestParityF32 holds every position's logits to llama.cpp's scalar CPU
// build within 1e-4, for prompts that take each attention kernel (one
// token, a short batch, a batch of 64+ on the tiled kernel), and logs the
// distance to the SIMD build.
func TestParityF32(t *testing.T) {
	ref := parity.Require(t)
	for _, tc := range shapes {
		t.Run(tc.name, func(t *testing.T) {
			c := small()
			tc.mod(&c)
			path := writeModel(t, c)
			m := load(t, path, model.Options{Threads: 2})
			for _, n := range []int{1, 7, 70} {
				toks := prompt(n, c.NVocab)
				got := batchLogits(t, m, toks, 512)
				for _, cpu := range []string{"generic", "native"} {
					want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: cpu})
					if err != nil {
						t.Fatal(err)
					}
					d, at := maxAbs(want, got)
					t.Logf("%s n=%d vs %s: max|Δlogit| = %.3g (at pos %d)", tc.name, n, cpu, d, at)
					tol := map[string]float64{"native": 1e-3, "generic": 1e-4}[cpu]
					if d > tol {
						t.Errorf("%s n=%d vs %s: max|Δlogit| %.3g > %g at position %d", tc.name, n, cpu, d, tol, at)
					}
				}
			}
		})
	}
}

// TestParityQuantized: llama-quantize's Q2_K and Q4_K_M type choice, the
// logits of a 70-token prompt within 1e-4 of the scalar build and 32
// greedy tokens identical to it.
func TestParityQuantized(t *testing.T) {
	if testing.Short() {
		t.Skip("quantized parity; skipped with -short")
	}
	ref := parity.Require(t)
	for _, typ := range []synth.OutType{synth.TypeQ4_K_M, synth.TypeQ2_K} {
		for _, tc := range shapes[:2] {
			t.Run(typ.String()+"-"+tc.name, func(t *testing.T) {
				c := small()
				tc.mod(&c)
				c.Type = typ
				path := writeModel(t, c)
				m := load(t, path, model.Options{Threads: 2})
				toks := prompt(70, c.NVocab)
				got := batchLogits(t, m, toks, 512)
				want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
				if err != nil {
					t.Fatal(err)
				}
				d, at := maxAbs(want, got)
				t.Logf("n=70: max|Δlogit| = %.3g (at pos %d)", d, at)
				if d > 1e-4 {
					t.Errorf("max|Δlogit| %.3g at position %d", d, at)
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
				wantG, err := ref.GreedyOpts(path, short, 32, parity.LogitsOptions{Threads: 2, CPU: "generic"})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(wantG, gotG[:len(wantG)]); d != "" {
					t.Errorf("greedy 32 (-llama.cpp +k3):\n%s", d)
				}
			})
		}
	}
}

// TestParityLongDecode decodes past 512 cached positions, where llama.cpp
// splits each decode step's attention across its threads, and checks
// every step's logits and the greedy tokens.
func TestParityLongDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("decoding past 512 positions on both sides; skipped with -short")
	}
	ref := parity.Require(t)
	c := small()
	c.Type = synth.TypeQ8_0
	path := writeModel(t, c)
	m := load(t, path, model.Options{Threads: 2})
	toks := prompt(520, c.NVocab)
	const n = 12
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
		t.Errorf("greedy after 520 tokens (-llama.cpp +k3):\n%s", d)
	}
}
