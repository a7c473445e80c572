// Package modeltest holds what every architecture's tests do the same way:
// write a synthetic file, load it, feed a fixed prompt in ubatches and
// compare logits. It is imported by tests only (like plugintest).
package modeltest

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/synth"
)

// WriteSynth writes c as a synthetic GGUF file in a temporary directory
// and returns its path.
func WriteSynth(t testing.TB, c synth.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := synth.Write(path, c, synth.WriteOptions{Workers: 2}); err != nil {
		t.Fatalf("synth: %v", err)
	}
	return path
}

// Load opens path and builds its model (the architecture's package must be
// linked in); the file is closed when the test ends.
func Load(t testing.TB, path string, o model.Options) model.Model {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Prompt is n deterministic token ids below vocab, the same the parity
// harness gets.
func Prompt(n, vocab int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32((i*7919 + 13) % vocab)
	}
	return toks
}

// BatchLogits evaluates tokens on a fresh sequence in ubatches of ub and
// returns every position's logits.
func BatchLogits(t testing.TB, m model.Model, toks []int32, ub int) [][]float32 {
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

// MaxAbs is the largest |a-b| over all positions and the position it is
// at (-1 when equal); a NaN difference counts as largest.
func MaxAbs(a, b [][]float32) (float64, int) {
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
