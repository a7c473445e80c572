package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/tokenizer"
)

// vocabGGUF writes a tensor-less GGUF with a byte-level vocabulary: the 256
// byte tokens (GPT-2 spelling, in byte order), "he" from one merge, and a
// control token.
func vocabGGUF(t *testing.T) string {
	t.Helper()
	var toks []string
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
			r = 256 + rune(len(toks)-countPrintable(b))
		}
		toks = append(toks, string(r))
	}
	toks = append(toks, "he", "<|end|>")
	types := make([]tokenizer.TokenType, len(toks))
	for i := range types {
		types[i] = tokenizer.TypeNormal
	}
	types[257] = tokenizer.TypeControl
	c := tokenizer.Config{Model: "gpt2", Pre: "kimi-k2", Tokens: toks, Types: types, Merges: []string{"h e"}}
	kvs := append([]gguf.KV{{Key: "general.architecture", Value: gguf.Str("kimi-k3")}}, tokenizer.GGUFKVs(c)...)
	path := filepath.Join(t.TempDir(), "vocab.gguf")
	w, err := gguf.Create(path, kvs, nil, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// countPrintable counts the bytes below b that stand for themselves.
func countPrintable(b int) int {
	n := 0
	for c := 0; c < b; c++ {
		if (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF) {
			n++
		}
	}
	return n
}

func TestTokenizeCommand(t *testing.T) {
	model := vocabGGUF(t)
	input := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(input, []byte("hey<|end|>"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"text", []string{"-m", model, "--text", "hey<|end|>"}, `{"tokens":[256,121,257]}`},
		{"file", []string{"--model", model, "--file", input}, `{"tokens":[256,121,257]}`},
		{"no special", []string{"-m", model, "--text", "he<|end|>", "--no-special"},
			`{"tokens":[256,60,124,101,110,100,124,62]}`},
		{"pieces", []string{"-m", model, "--text", "he <|end|>", "--pieces"},
			`{"tokens":[256,32,257],"pieces":["he"," ","<|end|>"]}`},
		{"empty", []string{"-m", model, "--text", ""}, `{"tokens":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := runMain(append([]string{"tokenize"}, tt.args...), &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if got := strings.TrimSpace(out.String()); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			var v map[string]any
			if err := json.Unmarshal(out.Bytes(), &v); err != nil {
				t.Errorf("output is not JSON: %v", err)
			}
		})
	}
}

func TestDetokenizeCommand(t *testing.T) {
	model := vocabGGUF(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"special shown", []string{"-m", model, "--tokens", "256,121,257"}, "hey<|end|>"},
		{"special hidden", []string{"-m", model, "--tokens", "256, 121,257", "--no-special"}, "hey"},
		{"byte tokens", []string{"-m", model, "--tokens", "228,184,173"}, "中"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := runMain(append([]string{"detokenize"}, tt.args...), &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTokenizeCommandErrors(t *testing.T) {
	model := vocabGGUF(t)
	tests := []struct {
		name string
		cmd  []string
		code int
	}{
		{"no model", []string{"tokenize", "--text", "x"}, 2},
		{"text and file", []string{"tokenize", "-m", model, "--text", "x", "--file", "y"}, 2},
		{"neither text nor file", []string{"tokenize", "-m", model}, 2},
		{"missing model file", []string{"tokenize", "-m", "/nonexistent.gguf", "--text", "x"}, 1},
		{"bad id", []string{"detokenize", "-m", model, "--tokens", "1,x"}, 1},
		{"id out of range", []string{"detokenize", "-m", model, "--tokens", "999"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := runMain(tt.cmd, &out, &errb); code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errb.String())
			}
		})
	}
}
