package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func addCorpusSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.SplitAfter(string(b), "\n") {
			f.Add(line)
		}
	}
	f.Add("")
	f.Add("\xf5\x80\x80\x80 \xf4\x90\x80\x80") // codepoints above U+10FFFF
	f.Add("<|im_end|><|k3_sep|>[BOS]")
}

// FuzzTokenize checks that no input makes tokenizing or streaming panic,
// that every id is in range, and that streamed text equals Detokenize's.
func FuzzTokenize(f *testing.F) {
	addCorpusSeeds(f)
	tks := []*Tokenizer{trainedTokenizer(f, "kimi-k2"), trainedTokenizer(f, "llama3"), trainedTokenizer(f, "deepseek-v3")}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range tks {
			for _, parse := range []bool{false, true} {
				ids, err := tk.Tokenize(s, true, parse)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					if id < 0 || int(id) >= tk.NVocab() {
						t.Fatalf("id %d out of range", id)
					}
				}
				want, err := tk.Detokenize(ids, false, true)
				if err != nil {
					t.Fatal(err)
				}
				d := tk.NewDecoder(false, true)
				var got strings.Builder
				for _, id := range ids {
					c, err := d.Add(id)
					if err != nil {
						t.Fatal(err)
					}
					got.WriteString(c)
				}
				got.WriteString(d.Flush())
				if got.String() != want {
					t.Fatalf("streamed %q, Detokenize %q", got.String(), want)
				}
			}
		}
	})
}

// FuzzRoundTrip checks that detokenize∘tokenize is the identity on valid
// UTF-8 for the pre-tokenizers that do not clean up spaces.
func FuzzRoundTrip(f *testing.F) {
	addCorpusSeeds(f)
	tks := []*Tokenizer{trainedTokenizer(f, "kimi-k2"), trainedTokenizer(f, "qwen2"), trainedTokenizer(f, "deepseek-v3")}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, tk := range tks {
			ids, err := tk.Tokenize(s, false, false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tk.Detokenize(ids, false, false)
			if err != nil {
				t.Fatal(err)
			}
			if got != s {
				t.Fatalf("round trip of %q gave %q", s, got)
			}
		}
	})
}
