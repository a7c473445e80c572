package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/gguf"
)

func writeKVs(t *testing.T, kvs []gguf.KV) *gguf.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v.gguf")
	w, err := gguf.Create(path, append([]gguf.KV{{Key: "general.architecture", Value: gguf.Str("kimi-k3")}}, kvs...), nil, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestConfigFromGGUFRoundTrip(t *testing.T) {
	c := tinyConfig("llama3", []string{"he", "<|eot_id|>"}, [][2]string{{"h", "e"}})
	c.Types = make([]TokenType, len(c.Tokens))
	for i := range c.Types {
		c.Types[i] = TypeNormal
	}
	c.Types[257] = TypeControl
	c.IDs = map[string]uint32{"bos_token_id": 1, "eos_token_id": 257}
	c.Flags = map[string]bool{"add_bos_token": false}
	got, err := ConfigFromGGUF(writeKVs(t, GGUFKVs(c)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestConfigFromGGUFErrors(t *testing.T) {
	tokens := gguf.KV{Key: "tokenizer.ggml.tokens", Value: gguf.Strs([]string{"a"})}
	model := gguf.KV{Key: "tokenizer.ggml.model", Value: gguf.Str("gpt2")}
	tests := []struct {
		name string
		kvs  []gguf.KV
		want string
	}{
		{"no tokens", []gguf.KV{model}, "tokenizer.ggml.tokens is missing"},
		{"tokens not strings", []gguf.KV{model, {Key: "tokenizer.ggml.tokens", Value: gguf.I32s([]int32{1})}}, "want a string array"},
		{"types not int32", []gguf.KV{model, tokens, {Key: "tokenizer.ggml.token_type", Value: gguf.U32s([]uint32{1})}}, "want an int32 array"},
		{"merges not strings", []gguf.KV{model, tokens, {Key: "tokenizer.ggml.merges", Value: gguf.Str("a b")}}, "want a string array"},
		{"no model", []gguf.KV{tokens}, "tokenizer.ggml.model is missing"},
		{"id of wrong type", []gguf.KV{model, tokens, {Key: "tokenizer.ggml.bos_token_id", Value: gguf.Str("1")}}, "bos_token_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ConfigFromGGUF(writeKVs(t, tt.kvs))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
