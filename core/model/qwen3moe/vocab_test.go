package qwen3moe_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/tokenizer"
	"github.com/k3-inference/k3/tools/parity"
)

// TestTokenizerParity: a synthetic qwen3moe file's tokenizer (qwen2
// pre-tokenizer, Qwen's added tokens, control and user-defined) splits a
// chat the way llama.cpp does, specials parsed and not.
func TestTokenizerParity(t *testing.T) {
	ref := parity.Require(t)
	path := writeModel(t, small())
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	text := "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat's 12345 + 678?  Ünïcödé 日本語<|im_end|>\n" +
		"<|im_start|>assistant\n<think>\nAdd them.\n</think>\n\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12345}}\n</tool_call><|im_end|>\n"
	for _, parse := range []bool{true, false} {
		want, err := ref.Tokenize(path, []byte(text), false, parse)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.Tokenize(text, false, parse)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("parse special %v (-llama.cpp +k3):\n%s", parse, d)
		}
	}
}

// TestStateSize: what StateSize reserves per position is what a sequence's
// caches hold, and a snapshot restores a shorter prefix exactly.
func TestStateSize(t *testing.T) {
	path := writeModel(t, small())
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _ := model.Lookup("qwen3moe")
	fixed, perToken, err := a.StateSize(f, f)
	if err != nil {
		t.Fatal(err)
	}
	c := small()
	if wantPer := int64(2 * c.NLayer * 2 * c.NHeadKV * c.HeadDim); fixed != 0 || perToken != wantPer {
		t.Errorf("StateSize %d + %d/token, want 0 + %d", fixed, perToken, wantPer)
	}
	m := load(t, path, model.Options{Threads: 2})
	v := m.Params().Vocab
	toks := prompt(9, c.NVocab)
	s := m.NewState()
	first := make([]float32, v)
	if err := m.Forward(s, toks[:5], false, first); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	want := make([]float32, v)
	if err := m.Forward(s, toks[5:], false, want); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(snap); err != nil || s.Pos() != 5 {
		t.Fatalf("restore: %v at %d", err, s.Pos())
	}
	got := make([]float32, v)
	if err := m.Forward(s, toks[5:], false, got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("after restore (-first run +restored):\n%s", d)
	}
}
