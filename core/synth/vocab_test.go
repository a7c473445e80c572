package synth

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVocab(t *testing.T) {
	for _, n := range []int{minVocab, 1024, 5000} {
		t.Run("", func(t *testing.T) {
			v, err := NewVocab(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Tokens) != n || len(v.Types) != n {
				t.Fatalf("%d tokens, %d types, want %d", len(v.Tokens), len(v.Types), n)
			}
			ids := map[string]int{}
			for i, tok := range v.Tokens {
				if j, dup := ids[tok]; dup {
					t.Fatalf("token %q at %d and %d", tok, j, i)
				}
				ids[tok] = i
			}
			for _, m := range v.Merges {
				l, r, ok := strings.Cut(m, " ")
				if !ok {
					t.Fatalf("merge %q has no space", m)
				}
				for _, part := range []string{l, r, l + r} {
					if _, ok := ids[part]; !ok {
						t.Fatalf("merge %q: %q is not a token", m, part)
					}
				}
			}
			for _, c := range controlTokens {
				id, ok := ids[c]
				if !ok || v.Types[id] != TokenControl {
					t.Errorf("control token %q: id %d present %v", c, id, ok)
				}
			}
			if v.Tokens[v.EOS] != "<|end_of_msg|>" || v.Tokens[v.BOS] != "[BOS]" || v.Tokens[v.PAD] != "[PAD]" {
				t.Errorf("eos %q bos %q pad %q", v.Tokens[v.EOS], v.Tokens[v.BOS], v.Tokens[v.PAD])
			}
		})
	}
	if _, err := NewVocab(minVocab - 1); err == nil {
		t.Error("vocabulary below the minimum accepted")
	}
}

// TestVocabLayout pins what tests elsewhere rely on: byte tokens first in
// GPT-2 form, merges learned from the sample, Kimi's specials in the last
// 256 ids of a large vocabulary.
func TestVocabLayout(t *testing.T) {
	v, err := NewVocab(163840)
	if err != nil {
		t.Fatal(err)
	}
	if v.Tokens[' '] != "Ġ" || v.Tokens['\n'] != "Ċ" || v.Tokens['A'] != "A" {
		t.Errorf("byte tokens: space %q newline %q A %q", v.Tokens[' '], v.Tokens['\n'], v.Tokens['A'])
	}
	if v.BOS != 163584 {
		t.Errorf("[BOS] at %d, want 163584 (Kimi's)", v.BOS)
	}
	if len(v.Merges) < 800 {
		t.Errorf("only %d merges learned", len(v.Merges))
	}
	for _, want := range []string{"Ġthe", "Ġexperts", "func", "Ġmemory"} {
		if v.ID(want) < 0 {
			t.Errorf("no merged token %q", want)
		}
	}
	w, _ := NewVocab(163840)
	if diff := cmp.Diff(v, w); diff != "" {
		t.Errorf("vocabulary not deterministic (-first +second):\n%s", diff)
	}
}

func TestPretokenize(t *testing.T) {
	got := pretokenize("Hello world, 12345 天气很好\n\n  x")
	want := []string{"Hello", " world", ",", " ", "123", "45", " ", "天气很好", "\n\n", "  ", "x"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pretokenize (-want +got):\n%s", diff)
	}
}
