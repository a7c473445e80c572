package tokenizer

import (
	"os"
	"sort"
	"sync"
	"testing"
)

// byteTokens returns the 256 single-byte tokens in byte order.
func byteTokens() []string {
	out := make([]string, 256)
	for b := range out {
		out[b] = byteEncode(string([]byte{byte(b)}))
	}
	return out
}

// tinyConfig is a byte-level vocabulary of the 256 bytes plus extra tokens
// (given as raw text) and merges (raw "left right"; encoded here).
func tinyConfig(pre string, extra []string, merges [][2]string) Config {
	c := Config{Model: "gpt2", Pre: pre, Tokens: byteTokens()}
	for _, e := range extra {
		c.Tokens = append(c.Tokens, byteEncode(e))
	}
	for _, m := range merges {
		c.Merges = append(c.Merges, byteEncode(m[0])+" "+byteEncode(m[1]))
	}
	if len(c.Merges) == 0 {
		c.Merges = []string{"x y"} // a merge that never applies
	}
	return c
}

// trainVocab learns a small BPE vocabulary from text split by pre: the 256
// byte tokens and then one token per merge, most frequent pair first.
func trainVocab(pre preKind, text string, nMerges int) (tokens, merges []string) {
	counts := map[string]int{}
	for _, w := range words(pre, text) {
		counts[w]++
	}
	type word struct {
		parts []string
		n     int
	}
	var ws []word
	for w, n := range counts {
		p := make([]string, len(w))
		for i := range w {
			p[i] = w[i : i+1]
		}
		ws = append(ws, word{p, n})
	}
	sort.Slice(ws, func(i, j int) bool {
		return ws[i].n > ws[j].n || (ws[i].n == ws[j].n && len(ws[i].parts) < len(ws[j].parts))
	})
	tokens = byteTokens()
	have := map[string]bool{}
	for _, tk := range tokens {
		have[tk] = true
	}
	for len(merges) < nMerges {
		pairs := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.parts); i++ {
				pairs[[2]string{w.parts[i], w.parts[i+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 1
		for p, n := range pairs {
			if n > bestN || (n == bestN && bestN > 1 && p[0]+" "+p[1] < best[0]+" "+best[1]) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		merges = append(merges, byteEncode(best[0])+" "+byteEncode(best[1]))
		if enc := byteEncode(best[0] + best[1]); !have[enc] {
			have[enc] = true
			tokens = append(tokens, enc)
		}
		for wi := range ws {
			p := ws[wi].parts
			out := p[:0]
			for i := 0; i < len(p); i++ {
				if i+1 < len(p) && p[i] == best[0] && p[i+1] == best[1] {
					out = append(out, p[i]+p[i+1])
					i++
					continue
				}
				out = append(out, p[i])
			}
			ws[wi].parts = out
		}
	}
	return tokens, merges
}

// kimiSpecials are Kimi-style special tokens used by the trained test
// vocabulary; <|k3_sep|> is user-defined so that it splits text even when
// special tokens are not parsed.
var kimiSpecials = []struct {
	text string
	typ  TokenType
}{
	{"[BOS]", TypeControl}, {"[EOS]", TypeControl}, {"<|im_end|>", TypeControl},
	{"<|im_user|>", TypeControl}, {"<|im_assistant|>", TypeControl}, {"<|im_system|>", TypeControl},
	{"<|im_middle|>", TypeControl}, {"[EOT]", TypeControl}, {"<think>", TypeControl},
	{"</think>", TypeControl}, {"<|end_of_msg|>", TypeControl}, {"<|reserved_token_1|>", TypeControl},
	{"<|reserved_token_10|>", TypeControl}, {"<|k3_sep|>", TypeUserDefined}, {"[UNUSED_TOKEN]", TypeUnused},
}

var trained sync.Map // pre -> *Tokenizer

// trainedTokenizer builds a tokenizer from a vocabulary trained on the
// English and code parts of the corpus.
func trainedTokenizer(t testing.TB, pre string) *Tokenizer {
	t.Helper()
	if tk, ok := trained.Load(pre); ok {
		return tk.(*Tokenizer)
	}
	var text []byte
	for _, f := range []string{"testdata/corpus/english.txt", "testdata/corpus/code.txt"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, b...)
	}
	k, err := lookupPre(pre)
	if err != nil {
		t.Fatal(err)
	}
	tokens, merges := trainVocab(k.kind, string(text), 600)
	c := Config{Model: "gpt2", Pre: pre, Tokens: tokens, Merges: merges, Types: make([]TokenType, len(tokens))}
	for i := range c.Types {
		c.Types[i] = TypeNormal
	}
	for _, s := range kimiSpecials {
		c.Tokens = append(c.Tokens, s.text)
		c.Types = append(c.Types, s.typ)
	}
	bos, _ := indexOf(c.Tokens, "[BOS]")
	eos, _ := indexOf(c.Tokens, "[EOS]")
	c.IDs = map[string]uint32{"bos_token_id": uint32(bos), "eos_token_id": uint32(eos)}
	tk, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	trained.Store(pre, tk)
	return tk
}

func indexOf(s []string, w string) (int, bool) {
	for i, x := range s {
		if x == w {
			return i, true
		}
	}
	return -1, false
}
