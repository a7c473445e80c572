package gguf

import (
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// TestFingerprint: the same file gives the same fingerprint when opened
// again, and a file that differs only in its metadata, its tensor table or
// its weights gives another.
func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{specFor(quant.F32), specFor(quant.Q8_0)}
	kvs := []KV{{"general.architecture", Str("llama")}, {"general.name", Str("a")}}
	fp := func(name string, kvs []KV, specs []TensorSpec, seed uint64) [32]byte {
		path := filepath.Join(dir, name+".gguf")
		writeModel(t, path, kvs, specs, randomData(t, specs, seed), WriteOptions{})
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got, err := f.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	base := fp("base", kvs, specs, 1)
	if again := fp("again", kvs, specs, 1); again != base {
		t.Error("the same model gave two fingerprints")
	}
	other := []KV{{"general.architecture", Str("llama")}, {"general.name", Str("b")}}
	renamed := []TensorSpec{specs[0], {Name: "w.other", Type: specs[1].Type, Shape: specs[1].Shape}}
	for name, got := range map[string][32]byte{
		"metadata": fp("meta", other, specs, 1),
		"tensors":  fp("tensors", kvs, renamed, 1),
		"weights":  fp("weights", kvs, specs, 2),
	} {
		if got == base {
			t.Errorf("another %s, the same fingerprint", name)
		}
	}
}
