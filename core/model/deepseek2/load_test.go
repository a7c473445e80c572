package deepseek2_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
)

// rewrite copies a model file with its metadata edited (edit returns
// false to drop a key) and without the tensor named drop.
func rewrite(t *testing.T, src string, edit func(*gguf.KV) bool, drop string, extra ...gguf.KV) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kvs []gguf.KV
	for _, kv := range f.KVs() {
		if edit == nil || edit(&kv) {
			kvs = append(kvs, kv)
		}
	}
	kvs = append(kvs, extra...)
	var specs []gguf.TensorSpec
	for _, ti := range f.Tensors() {
		if ti.Name != drop {
			specs = append(specs, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
		}
	}
	dst := filepath.Join(t.TempDir(), "edited.gguf")
	w, err := gguf.Create(dst, kvs, specs, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors() {
		if ti.Name == drop {
			continue
		}
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

// TestLoadErrors: files llama.cpp's deepseek2 loader refuses are refused
// with an error that names the problem, never a panic.
func TestLoadErrors(t *testing.T) {
	path := writeModel(t, small())
	key := func(k string) func(*gguf.KV) bool {
		return func(kv *gguf.KV) bool { return kv.Key != "deepseek2."+k }
	}
	set := func(k string, v gguf.Value) func(*gguf.KV) bool {
		return func(kv *gguf.KV) bool {
			if kv.Key == "deepseek2."+k {
				kv.Value = v
			}
			return true
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*gguf.KV) bool
		drop string
		want string
	}{
		{"no q lora rank", key("attention.q_lora_rank"), "", `missing key "attention.q_lora_rank"`},
		{"no shared count", key("expert_shared_count"), "", "expert_shared_count"},
		{"absorbed keys without k_b", nil, "blk.2.attn_k_b.weight", "attn_k_b"},
		{"kv_b layout announced", key("attention.key_length_mla"), "", "value_length_mla"},
		{"missing router", nil, "blk.1.ffn_gate_inp.weight", "ffn_gate_inp"},
		{"bad groups", set("expert_group_used_count", gguf.U32(4)), "", "groups used"},
		{"odd rope", set("rope.dimension_count", gguf.U32(15)), "", "rope.dimension_count"},
		{"unknown scaling", func(kv *gguf.KV) bool {
			if kv.Key == "deepseek2.rope.scaling.type" {
				kv.Value = gguf.Str("longrope")
			}
			return true
		}, "", "longrope"},
		{"wrong shape", set("expert_feed_forward_length", gguf.U32(128)), "", "shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := rewrite(t, path, tc.edit, tc.drop)
			f, err := gguf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = model.Load(f, model.Options{Threads: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// withExtra copies a model file with metadata added.
func withExtra(t *testing.T, src string, extra ...gguf.KV) string {
	t.Helper()
	return rewrite(t, src, nil, "", extra...)
}
