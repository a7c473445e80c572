package kimik3_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	_ "github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// small is the tiny preset cut down further so that a test file is a few
// hundred kB and llama.cpp evaluates it in milliseconds.
func small() synth.Config {
	c, _ := synth.Preset("tiny")
	c.NVocab = 512
	return c
}

func writeModel(t *testing.T, c synth.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := synth.Write(path, c, synth.WriteOptions{Workers: 2}); err != nil {
		t.Fatalf("synth: %v", err)
	}
	return path
}

func load(t *testing.T, path string, threads int) model.Model {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, model.Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func prompt(n, vocab int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32((i*7919 + 13) % vocab)
	}
	return toks
}

// batchLogits evaluates tokens in ubatches of ub and returns every position's logits.
func batchLogits(t *testing.T, m model.Model, toks []int32, ub int) [][]float32 {
	t.Helper()
	s := m.NewState()
	v := m.Params().Vocab
	var rows [][]float32
	for i := 0; i < len(toks); i += ub {
		part := toks[i:min(i+ub, len(toks))]
		buf := make([]float32, len(part)*v)
		if err := m.Forward(s, part, true, buf); err != nil {
			t.Fatal(err)
		}
		for j := range part {
			rows = append(rows, buf[j*v:(j+1)*v])
		}
	}
	return rows
}

func maxAbs(a, b [][]float32) (float64, int) {
	var m float64
	at := -1
	for i := range a {
		for j := range a[i] {
			if d := math.Abs(float64(a[i][j] - b[i][j])); d > m || math.IsNaN(d) {
				m, at = d, i
			}
		}
	}
	return m, at
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
				want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true})
				if err != nil {
					t.Fatal(err)
				}
				got := batchLogits(t, m, toks, 512)
				d, at := maxAbs(want, got)
				t.Logf("%s n=%d: max|Δ| = %.3g (at pos %d)", tc.name, n, d, at)
				if d > 1e-3 {
					t.Errorf("%s n=%d: max|Δlogit| %.3g > 1e-3 at position %d", tc.name, n, d, at)
				}
			}
		})
	}
}
