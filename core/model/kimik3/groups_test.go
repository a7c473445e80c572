package kimik3_test

import (
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// withKVs copies a model file, appending extra metadata.
func withKVs(t *testing.T, src string, extra ...gguf.KV) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kvs := append(append([]gguf.KV(nil), f.KVs()...), extra...)
	var specs []gguf.TensorSpec
	for _, ti := range f.Tensors() {
		specs = append(specs, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
	}
	dst := filepath.Join(t.TempDir(), "edited.gguf")
	w, err := gguf.Create(dst, kvs, specs, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors() {
		b, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(ti.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestParityExpertGroups routes with DeepSeek-style expert groups (the
// best two groups of four by their two best experts), which llama.cpp
// applies to any MoE file that declares them.
func TestParityExpertGroups(t *testing.T) {
	ref := parity.Require(t)
	c := small()
	c.NExpert, c.NExpertUsed = 16, 3
	src := writeModel(t, c)
	path := withKVs(t, src,
		gguf.KV{Key: synth.Arch + ".expert_group_count", Value: gguf.U32(4)},
		gguf.KV{Key: synth.Arch + ".expert_group_used_count", Value: gguf.U32(2)})
	toks := prompt(20, c.NVocab)
	want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
	if err != nil {
		t.Fatal(err)
	}
	got := batchLogits(t, load(t, path, 2), toks, 512)
	d, at := maxAbs(want, got)
	t.Logf("expert groups vs llama.cpp generic: max|Δlogit| = %.3g (at pos %d)", d, at)
	if d > 1e-4 {
		t.Errorf("max|Δlogit| %.3g at position %d", d, at)
	}
	// the groups must change something, or this test tests nothing
	plain := batchLogits(t, load(t, src, 2), toks, 512)
	if d, _ := maxAbs(plain, got); d == 0 {
		t.Error("expert groups changed no logit")
	}
}
