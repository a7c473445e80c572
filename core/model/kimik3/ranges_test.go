package kimik3_test

import (
	"testing"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// TestRangesMatchOnePiece runs a long forward call in row ranges (every
// step but the routed experts a range at a time) and in one piece: the
// logits must be the same bits, for every layer kind, with the attention
// residuals banking in the middle of a call, with the chunkwise delta
// rule, and for the last row alone.
func TestRangesMatchOnePiece(t *testing.T) {
	base := small()
	for _, tc := range []struct {
		name  string
		mod   func(*synth.Config)
		delta int
		sub   int
	}{
		{"tiny", func(c *synth.Config) {}, 0, 64},
		{"tiny-128", func(c *synth.Config) {}, 0, 128},
		{"plain", func(c *synth.Config) {
			c.NLatent, c.QLoRA, c.AttnResBlock, c.NExpertShared = 0, 0, 0, 0
		}, 0, 64},
		{"kda-heavy-chunked", func(c *synth.Config) {
			c.NLayer, c.MLALayers, c.NDense = 5, []int{2}, 2
			c.AttnResBlock, c.NExpertShared = 1, 2
		}, 16, 72},
		{"mla-heavy", func(c *synth.Config) {
			c.MLALayers, c.AttnResBlock = []int{0, 1, 3}, 3
		}, 0, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			path := writeModel(t, c)
			m := loadOpts(t, path, model.Options{Threads: 2, DeltaChunk: tc.delta})
			toks := prompt(230, c.NVocab)
			restore := kimik3.SetSubRows(1 << 20)
			whole := batchLogits(t, m, toks, 512)
			wholeLast := lastLogits(t, m, toks)
			restore()
			defer kimik3.SetSubRows(tc.sub)()
			ranged := batchLogits(t, m, toks, 512)
			if d, at := maxAbs(whole, ranged); d != 0 {
				t.Errorf("ranges of %d rows vs one piece: max|Δlogit| %.3g at position %d", tc.sub, d, at)
			}
			last := lastLogits(t, m, toks)
			if d, _ := maxAbs([][]float32{wholeLast}, [][]float32{last}); d != 0 {
				t.Errorf("last row alone, ranges vs one piece: max|Δlogit| %.3g", d)
			}
			if d, _ := maxAbs([][]float32{whole[len(whole)-1]}, [][]float32{last}); d != 0 {
				t.Errorf("last row alone vs every row: max|Δlogit| %.3g", d)
			}
		})
	}
}

// lastLogits is the logits of the last token of one forward call.
func lastLogits(t *testing.T, m model.Model, toks []int32) []float32 {
	t.Helper()
	s := m.NewState()
	out := make([]float32, m.Params().Vocab)
	if err := m.Forward(s, toks, false, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestParityRanges holds a call run in ranges to llama.cpp's scalar build
// running the prompt as one ubatch.
func TestParityRanges(t *testing.T) {
	ref := parity.Require(t)
	c := small()
	path := writeModel(t, c)
	m := load(t, path, 2)
	defer kimik3.SetSubRows(64)()
	toks := prompt(230, c.NVocab)
	want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
	if err != nil {
		t.Fatal(err)
	}
	got := batchLogits(t, m, toks, 512)
	d, at := maxAbs(want, got)
	t.Logf("230 tokens in ranges of 64 vs llama.cpp generic: max|Δlogit| = %.3g (at pos %d)", d, at)
	if d > 1e-4 {
		t.Errorf("max|Δlogit| %.3g at position %d", d, at)
	}
}
