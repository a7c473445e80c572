package qwen3moe

import (
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
)

// fakeConfig is metadata as a map of short keys.
type fakeConfig map[string]any

func (c fakeConfig) Arch() string { return Arch }
func (c fakeConfig) Has(k string) bool {
	_, ok := c[k]
	return ok
}
func (c fakeConfig) Uint(k string, def uint64) uint64 {
	if v, ok := c[k].(int); ok {
		return uint64(v)
	}
	return def
}
func (c fakeConfig) Float(k string, def float64) float64 {
	if v, ok := c[k].(float64); ok {
		return v
	}
	return def
}
func (c fakeConfig) Bool(k string, def bool) bool { return def }
func (c fakeConfig) Ints(k string) []int64 {
	switch v := c[k].(type) {
	case int:
		return []int64{int64(v)}
	case []int64:
		return v
	}
	return nil
}
func (c fakeConfig) Err() error { return nil }
func (c fakeConfig) String(k, def string) string {
	if v, ok := c[k].(string); ok {
		return v
	}
	return def
}

func goodConfig() fakeConfig {
	return fakeConfig{"embedding_length": 64, "block_count": 2, "attention.head_count": 4, "attention.head_count_kv": 2,
		"attention.layer_norm_rms_epsilon": 1e-6, "attention.key_length": 16, "attention.value_length": 16,
		"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 32, "rope.freq_base": 1e6}
}

// TestReadParamsErrors: metadata llama.cpp would reject (or k3 cannot run)
// is an error that names the key, never a panic.
func TestReadParamsErrors(t *testing.T) {
	if _, err := readParams(goodConfig()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(fakeConfig)
		want string
	}{
		{"no heads", func(c fakeConfig) { delete(c, "attention.head_count") }, "attention.head_count"},
		{"kv heads", func(c fakeConfig) { c["attention.head_count_kv"] = 3 }, "head_count_kv"},
		{"per-layer kv heads", func(c fakeConfig) { c["attention.head_count_kv"] = []int64{2, 4} }, "varies by layer"},
		{"value length", func(c fakeConfig) { c["attention.value_length"] = 8 }, "must be equal"},
		{"no experts used", func(c fakeConfig) { c["expert_used_count"] = 0 }, "experts used"},
		{"more used than experts", func(c fakeConfig) { c["expert_used_count"] = 9 }, "experts used"},
		{"no eps", func(c fakeConfig) { delete(c, "attention.layer_norm_rms_epsilon") }, "layer_norm_rms_epsilon"},
		{"no blocks", func(c fakeConfig) { c["block_count"] = 0 }, "block_count"},
		{"odd rope", func(c fakeConfig) { c["rope.dimension_count"] = 15 }, "rope.dimension_count"},
		{"no expert width", func(c fakeConfig) { delete(c, "expert_feed_forward_length") }, "expert_feed_forward_length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := goodConfig()
			tc.mod(c)
			_, err := readParams(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

type noWeights struct{}

func (noWeights) Tensor(string) (gguf.TensorInfo, bool)      { return gguf.TensorInfo{}, false }
func (noWeights) TensorData(gguf.TensorInfo) ([]byte, error) { return nil, nil }

// TestNewMissingTensors: a file without the tensors is refused with their
// names.
func TestNewMissingTensors(t *testing.T) {
	_, err := New(goodConfig(), noWeights{}, model.Options{Threads: 1})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, name := range []string{"token_embd.weight", "blk.1.ffn_gate_exps.weight", "blk.0.attn_output.weight"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}
