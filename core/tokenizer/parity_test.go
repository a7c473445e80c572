package tokenizer

import (
	"bytes"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

type tokMode struct {
	addSpecial, parseSpecial bool
}

func (m tokMode) String() string {
	return fmt.Sprintf("add=%v,parse=%v", m.addSpecial, m.parseSpecial)
}

var tokModes = []tokMode{{false, false}, {false, true}, {true, true}}

// splitAt cuts ids at every sep.
func splitAt(ids []int32, sep int32) [][]int32 {
	out := [][]int32{{}}
	for _, id := range ids {
		if id == sep {
			out = append(out, []int32{})
			continue
		}
		out[len(out)-1] = append(out[len(out)-1], id)
	}
	return out
}

// TestParityBigVocab compares k3 with llama.cpp on the o200k-based
// vocabulary under each pre-tokenizer: every corpus case tokenized in each
// mode, the detokenization of those tokens, and the piece of every token.
func TestParityBigVocab(t *testing.T) {
	r := parity.Require(t)
	if testing.Short() {
		t.Skip("loads a 200k-token vocabulary in llama.cpp several times")
	}
	cases := append(append(corpusCases(t), randomCases(2000)...), longCases()...)
	for _, pre := range []string{"kimi-k2", "llama3", "qwen2", "deepseek-v3", "gpt-2"} {
		t.Run(pre, func(t *testing.T) {
			path := bigVocab(t, pre)
			tk := loadGGUF(t, path)
			sep, ok := tk.Lookup(caseSep)
			if !ok {
				t.Fatalf("%s lacks %s", path, caseSep)
			}
			var all bytes.Buffer
			for i, c := range cases {
				if i > 0 {
					all.WriteString(caseSep)
				}
				all.WriteString(c.text)
			}
			var k3ids []int32
			for _, m := range tokModes {
				t.Run(m.String(), func(t *testing.T) {
					got, err := tk.Tokenize(all.String(), m.addSpecial, m.parseSpecial)
					if err != nil {
						t.Fatal(err)
					}
					want, err := r.Tokenize(path, all.Bytes(), m.addSpecial, m.parseSpecial)
					if err != nil {
						t.Fatal(err)
					}
					compareCases(t, cases, splitAt(want, sep), splitAt(got, sep))
					if m.parseSpecial && !m.addSpecial {
						k3ids = got
					}
				})
			}
			t.Run("detokenize", func(t *testing.T) { parityDetokenize(t, r, path, tk, k3ids) })
			t.Run("pieces", func(t *testing.T) { parityPieces(t, r, path, tk) })
		})
	}
}

// randomCases are short strings drawn from pieces that sit on the edges of
// the split rules: whitespace of every kind, apostrophes and contraction
// letters, digits of several scripts, letters with and without marks, Han
// and kana, punctuation, symbols, emoji with joiners, special-token text and
// invalid UTF-8.
func randomCases(n int) []corpusCase {
	pieces := []string{" ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u00a0", "\u3000", "\u2028", "\u0085",
		"'", "'s", "'S", "'re", "'LL", "'d", "'t", "'m", "'ve", "s", "t", "re", "ll",
		"0", "7", "123", "4567", "\u0661\u0662", "\uff11", "\u2460", "\u00bd",
		"a", "Z", "word", "Word", "WORD", "\u00e9", "e\u0301", "\u0301", "\u0915\u093f", "\u0e01\u0e34", "\u00df", "\u0130",
		"\u4e2d", "\u6587\u5b57", "\u3042", "\u30ab\u30ca", "\uff76", "\ud55c", "\u9fa6", "\U00020000", "\U0002ebf0", "\u2ffc",
		".", ",", "!", "?", "...", "(", ")", "-", "_", "/", "\\", "\"", "#", "$", "%", "&", "*", "+", "<", "=", ">", "@", "[", "]", "^", "`", "{", "|", "}", "~",
		"\u3002", "\uff0c", "\u201c", "\u2014", "\u00a9", "\u20ac", "\u2211",
		"\U0001f600", "\U0001f44d\U0001f3fd", "\u200d", "\U0001f468\u200d\U0001f469", "\ufe0f", "\u200b", "\ufeff", "\ue000", "\U000e0080", "\x01", "\x00", "\x7f",
		"<|im_end|>", "[EOS]", "<tool>", "<|reserved_token_1|>", "<think>",
		"\x80", "\xff", "\xe4\xb8", "\xc0\x80", "\xed\xa0\x80", "\xf0\x9f\x98"}
	rng := rand.New(rand.NewSource(42))
	cases := make([]corpusCase, n)
	for i := range cases {
		var sb strings.Builder
		for k := rng.Intn(12) + 1; k > 0; k-- {
			sb.WriteString(pieces[rng.Intn(len(pieces))])
		}
		cases[i] = corpusCase{fmt.Sprintf("random%d", i), sb.String()}
	}
	return cases
}

// longCases are long runs of one kind, where BPE works on a single long
// word or the splitter on a long stretch.
func longCases() []corpusCase {
	return []corpusCase{
		{"spaces", strings.Repeat(" ", 5000) + "x"},
		{"newlines", strings.Repeat("\n", 3000)},
		{"crlf tabs", strings.Repeat("\r\n\t ", 1000)},
		{"digits", strings.Repeat("1234567890", 1000)},
		{"letters", strings.Repeat("a", 4000)},
		{"word", strings.Repeat("tokenization", 400)},
		{"han", strings.Repeat("中文字符", 1000)},
		{"punct", strings.Repeat("=-", 2000)},
		{"emoji", strings.Repeat("😀", 1000)},
		{"invalid", strings.Repeat("\xff\xfe", 1000)},
	}
}

// compareCases reports per-case agreement and fails on any difference.
func compareCases(t *testing.T, cases []corpusCase, want, got [][]int32) {
	t.Helper()
	if len(want) != len(cases) || len(got) != len(cases) {
		t.Fatalf("split into %d (llama.cpp) and %d (k3) cases, want %d", len(want), len(got), len(cases))
	}
	same, tokens, shown := 0, 0, 0
	for i, c := range cases {
		tokens += len(want[i])
		if cmp.Equal(want[i], got[i]) {
			same++
			continue
		}
		if shown++; shown <= 5 {
			j := 0
			for j < len(want[i]) && j < len(got[i]) && want[i][j] == got[i][j] {
				j++
			}
			t.Errorf("case %s %q: first difference at token %d:\nllama.cpp %v\nk3        %v",
				c.name, clip(c.text, 80), j, window(want[i], j), window(got[i], j))
		}
	}
	t.Logf("%d/%d cases identical (%.2f%%), %d llama.cpp tokens", same, len(cases), 100*float64(same)/float64(len(cases)), tokens)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func window(ids []int32, j int) []int32 {
	return ids[max(0, j-3):min(len(ids), j+5)]
}

// parityDetokenize renders, in all four modes, one sequence: BOS, k3's
// tokens of the corpus, random tokens that mix special, unused and byte-level
// ones, runs of the single characters the space clean-up looks at, and EOS.
func parityDetokenize(t *testing.T, r *parity.Ref, path string, tk *Tokenizer, corpus []int32) {
	rng := rand.New(rand.NewSource(1))
	seq := append([]int32{tk.BOS()}, corpus...)
	for j := 0; j < 5000; j++ {
		if rng.Intn(4) == 0 { // the special and padding block at the top
			seq = append(seq, int32(tk.NVocab()-1-rng.Intn(80)))
		} else {
			seq = append(seq, int32(rng.Intn(tk.NVocab())))
		}
	}
	for j := 0; j < 20000; j++ {
		c := " '"[rng.Intn(2)]
		if rng.Intn(2) == 0 {
			c = ".,?!smrvetdlx"[rng.Intn(13)]
		}
		id, ok := tk.Lookup(byteEncode(string([]byte{c})))
		if !ok {
			t.Fatalf("no token for %q", c)
		}
		seq = append(seq, id)
	}
	seq = append(seq, tk.EOS())
	for _, rm := range []bool{false, true} {
		for _, un := range []bool{false, true} {
			want, err := r.Detokenize(path, seq, rm, un)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tk.Detokenize(seq, rm, un)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Errorf("remove=%v unparse=%v: differ at byte %d of %d/%d: llama.cpp %q, k3 %q",
					rm, un, i, len(want), len(got), clip(string(want[i:]), 40), clip(got[i:], 40))
			}
		}
	}
}

func parityPieces(t *testing.T, r *parity.Ref, path string, tk *Tokenizer) {
	all := make([]int32, tk.NVocab())
	for i := range all {
		all[i] = int32(i)
	}
	for _, special := range []bool{false, true} {
		want, err := r.Pieces(path, all, special)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i, w := range want {
			got, err := tk.Piece(int32(i), special)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(w) {
				if bad++; bad <= 5 {
					t.Errorf("piece %d (%q) special=%v: llama.cpp %q, k3 %q", i, tk.Token(int32(i)), special, w, got)
				}
			}
		}
		t.Logf("special=%v: %d/%d pieces identical", special, len(want)-bad, len(want))
	}
}

// TestParitySynthVocab compares k3 with llama.cpp on the vocabulary of the
// model k3 synth writes (its tiny preset), one corpus file per call.
func TestParitySynthVocab(t *testing.T) {
	r := parity.Require(t)
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	tk := loadGGUF(t, path)
	cases := corpusCases(t)
	for _, m := range tokModes {
		same, total, tokens := 0, 0, 0
		for _, c := range cases {
			if strings.Contains(c.name, ":") {
				continue // whole files only: one llama.cpp call each
			}
			total++
			want, err := r.Tokenize(path, []byte(c.text), m.addSpecial, m.parseSpecial)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tk.Tokenize(c.text, m.addSpecial, m.parseSpecial)
			if err != nil {
				t.Fatal(err)
			}
			tokens += len(want)
			if cmp.Equal(want, got) {
				same++
				continue
			}
			j := 0
			for j < len(want) && j < len(got) && want[j] == got[j] {
				j++
			}
			t.Errorf("%v %s: first difference at token %d: llama.cpp %v, k3 %v", m, c.name, j, window(want, j), window(got, j))
		}
		t.Logf("%v: %d/%d files identical, %d tokens", m, same, total, tokens)
	}
}

// edgeVocab is a handcrafted vocabulary that reaches the rarely used paths:
// merges whose result is not a token (bytes fallback), a byte with no token
// (dropped), a merge listed twice, tokens outside the byte-level alphabet,
// a BYTE-type token, and specials that llama.cpp recognises by their text.
func edgeVocab(pre string) Config {
	c := tinyConfig(pre, nil, nil)
	c.Tokens[int('z')] = "[no z]" // 'z' has no token of its own
	c.Merges = nil
	add := func(text string, typ TokenType) {
		c.Tokens = append(c.Tokens, text)
		for len(c.Types) < len(c.Tokens)-1 {
			c.Types = append(c.Types, TypeNormal)
		}
		c.Types = append(c.Types, typ)
	}
	add("abc", TypeNormal)
	add("xy", TypeNormal)
	add("Ġthe", TypeNormal)
	add("中", TypeNormal) // not byte-level: never produced, rendered as [UNK_BYTE...]
	add("<0x41>", TypeByte)
	add("<|endoftext|>", TypeNormal) // forced to CONTROL by its text
	add("[UNK]", TypeUnknown)
	add("<u>", TypeUserDefined)
	add("<|unused_x|>", TypeControl)
	add("[gone]", TypeUnused)
	c.Merges = []string{"a b", "ab c", "x y", "x y", "Ġ t", "h e", "Ġt he", "y z", "bogus", "中 文"}
	c.IDs = map[string]uint32{"bos_token_id": uint32(len(c.Tokens) - 4), "eos_token_id": uint32(len(c.Tokens) - 5)}
	c.Flags = map[string]bool{"add_bos_token": true, "add_eos_token": true}
	return c
}

// TestParityEdgeVocab checks the rare paths on small vocabularies, one
// llama.cpp call per text.
func TestParityEdgeVocab(t *testing.T) {
	r := parity.Require(t)
	texts := []string{"abc", "abd", "abcabc ab c", "xyz xy yz z zz", " the them", "A<0x41>",
		"<|endoftext|>x<|endoftext|>", "[UNK] <u> <|unused_x|>", "中文", "", "\xff z"}
	for _, pre := range []string{"kimi-k2", "llama3"} {
		t.Run(pre, func(t *testing.T) {
			c := edgeVocab(pre)
			path := filepath.Join(t.TempDir(), "edge.gguf")
			if err := writeVocabGGUF(path, c); err != nil {
				t.Fatal(err)
			}
			tk := loadGGUF(t, path)
			for _, text := range texts {
				for _, m := range tokModes {
					want, err := r.Tokenize(path, []byte(text), m.addSpecial, m.parseSpecial)
					if err != nil {
						t.Fatal(err)
					}
					got, err := tk.Tokenize(text, m.addSpecial, m.parseSpecial)
					if err != nil {
						t.Fatal(err)
					}
					if !cmp.Equal(want, got) {
						t.Errorf("%q %v: llama.cpp %v, k3 %v", text, m, want, got)
					}
				}
			}
			all := make([]int32, tk.NVocab())
			for i := range all {
				all[i] = int32(i)
			}
			for _, special := range []bool{false, true} {
				want, err := r.Pieces(path, all, special)
				if err != nil {
					t.Fatal(err)
				}
				for i, w := range want {
					if got, _ := tk.Piece(int32(i), special); got != string(w) {
						t.Errorf("piece %d %q special=%v: llama.cpp %q, k3 %q", i, tk.Token(int32(i)), special, w, got)
					}
				}
			}
			for _, rm := range []bool{false, true} {
				for _, un := range []bool{false, true} {
					want, err := r.Detokenize(path, all, rm, un)
					if err != nil {
						t.Fatal(err)
					}
					if got, _ := tk.Detokenize(all, rm, un); got != string(want) {
						t.Errorf("detokenize all remove=%v unparse=%v: llama.cpp %q, k3 %q", rm, un, want, got)
					}
				}
			}
		})
	}
}
