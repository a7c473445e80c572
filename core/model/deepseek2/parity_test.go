package deepseek2_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	_ "github.com/k3-inference/k3/core/model/deepseek2"
	"github.com/k3-inference/k3/core/model/modeltest"
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

// small is the deepseek2 tiny preset cut down so that a test file is a few
// MB and llama.cpp evaluates it in milliseconds.
func small() synth.Config {
	c, err := synth.ArchPreset(synth.ArchDeepSeek2, "tiny")
	if err != nil {
		panic(err)
	}
	c.NVocab = 512
	return c
}

// lite is DeepSeek-V2-Lite's form: no q LoRA (llama.cpp allows that only at
// 26 or 27 layers), softmax gating without bias or groups, no YaRN, on
// narrow layers so that 26 of them stay small.
func lite(c *synth.Config) {
	c.NLayer, c.QLoRA, c.NEmbd, c.NFF, c.NFFExp, c.NExpert, c.NExpertUsed = 26, 0, 64, 128, 64, 8, 2
	c.GatingFunc, c.ProbsBias, c.ExpertGroups, c.ExpertGroupsUsed = 1, false, 0, 0
	c.ExpWeightsNorm, c.ExpWeightsScale, c.YarnFactor = false, 1, 0
}

// shapes are the F32 files the parity tests run: both MLA layouts, q LoRA
// on and off, YaRN on and off, group-limited routing, sigmoid + bias and
// softmax gating.
var shapes = []struct {
	name string
	mod  func(*synth.Config)
}{
	// q LoRA, absorbed, YaRN (factor 40, mscale_all_dim 1), 4 groups of 4
	// with 2 used, sigmoid + exp_probs_b, weight norm and scale
	{"tiny", func(c *synth.Config) {}},
	{"kvb", func(c *synth.Config) { c.KVB = true }},
	{"kvb-lite", func(c *synth.Config) { lite(c); c.KVB = true }},
	{"lite", lite},
	{"softmax-noyarn", func(c *synth.Config) {
		c.GatingFunc, c.ProbsBias, c.ExpertGroups, c.YarnFactor, c.RopeBase = 1, false, 0, 0, 50000
		c.NDense, c.NExpertShared, c.ExpWeightsScale = 2, 2, 0
	}},
	// YaRN with mscale_all_dim != 1 (DeepSeek V2's 0.707): the graph's
	// kq_scale and the context's attention factor both move
	{"yarn-mscale", func(c *synth.Config) {
		c.YarnFactor, c.YarnMscaleAllDim, c.YarnOrigCtx, c.ExpertGroups, c.ExpertGroupsUsed = 16, 0.707, 32, 8, 3
	}},
	// Kimi K2's per-head sizes (latent 512, qk 128+64, v 128) on a narrow model
	{"k2-heads", func(c *synth.Config) {
		c.NEmbd, c.NHead, c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 512, 4, 256, 512, 128, 64, 128
		c.NFFExp, c.NFF, c.ExpertGroups, c.RopeBase, c.YarnFactor, c.YarnOrigCtx = 256, 512, 1, 50000, 32, 4096
		c.Tokenizer = "kimi-k2"
	}},
}

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
				want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
				if err != nil {
					t.Fatal(err)
				}
				d, at := maxAbs(want, got)
				t.Logf("%s n=%d vs generic: max|Δlogit| = %.3g (at pos %d)", tc.name, n, d, at)
				if d > 1e-4 {
					t.Errorf("%s n=%d: max|Δlogit| %.3g > 1e-4 at position %d", tc.name, n, d, at)
				}
			}
		})
	}
}

// TestParityQuantized: llama-quantize-typed Q2_K and Q4_K_M files (as
// synth writes them) agree with llama.cpp's scalar CPU code at the logits
// and in greedy continuations.
func TestParityQuantized(t *testing.T) {
	if testing.Short() {
		t.Skip("quantized parity takes a while; skipped with -short")
	}
	ref := parity.Require(t)
	for _, tc := range []struct {
		name string
		typ  synth.OutType
		mod  func(*synth.Config)
	}{
		{"q2_k", synth.TypeQ2_K, nil},
		{"q4_k_m", synth.TypeQ4_K_M, nil},
		{"q2_k-kvb", synth.TypeQ2_K, func(c *synth.Config) { c.KVB = true }},
		{"q4_k_m-softmax", synth.TypeQ4_K_M, func(c *synth.Config) { c.GatingFunc, c.ProbsBias, c.ExpertGroups, c.YarnFactor = 1, false, 0, 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := small()
			c.Type = tc.typ
			if tc.mod != nil {
				tc.mod(&c)
			}
			path := writeModel(t, c)
			m := load(t, path, model.Options{Threads: 2})
			toks := prompt(40, c.NVocab)
			got := batchLogits(t, m, toks, 512)
			want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
			if err != nil {
				t.Fatal(err)
			}
			d, at := maxAbs(want, got)
			t.Logf("%s n=40 vs generic: max|Δlogit| = %.3g (at pos %d)", tc.name, d, at)
			if d > 1e-4 {
				t.Errorf("%s: max|Δlogit| %.3g at position %d", tc.name, d, at)
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
			wantG, err := ref.GreedyOpts(path, short, 32, parity.LogitsOptions{Threads: 2, CPU: "generic", IgnoreEOG: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(wantG, gotG[:len(wantG)]); d != "" {
				t.Errorf("greedy 32 vs generic (-llama.cpp +k3):\n%s", d)
			}
		})
	}
}

// TestBatchVsStep: a prompt as one batch and token by token agree bit for
// bit below 64 tokens (same kernels, as in llama.cpp).
func TestBatchVsStep(t *testing.T) {
	c := small()
	path := writeModel(t, c)
	m := load(t, path, model.Options{Threads: 2})
	toks := prompt(9, c.NVocab)
	d, at := maxAbs(batchLogits(t, m, toks, 512), batchLogits(t, m, toks, 1))
	if d != 0 {
		t.Errorf("batch and step differ by %.3g at position %d", d, at)
	}
}

// TestParityLinearRope: linear RoPE scaling (rope.scaling.type linear),
// where deepseek2's kq_scale still takes the (1 + 0.1·ln factor) mscale.
func TestParityLinearRope(t *testing.T) {
	ref := parity.Require(t)
	c := small()
	c.YarnFactor = 0
	path := withExtra(t, writeModel(t, c), gguf.KV{Key: "deepseek2.rope.scaling.type", Value: gguf.Str("linear")},
		gguf.KV{Key: "deepseek2.rope.scaling.factor", Value: gguf.F32(4)})
	m := load(t, path, model.Options{Threads: 2})
	toks := prompt(20, c.NVocab)
	want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
	if err != nil {
		t.Fatal(err)
	}
	d, at := maxAbs(want, batchLogits(t, m, toks, 512))
	t.Logf("linear rope n=20 vs generic: max|Δlogit| = %.3g (at pos %d)", d, at)
	if d > 1e-4 {
		t.Errorf("max|Δlogit| %.3g at position %d", d, at)
	}
}
