package tokenizer

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestCleanSpaces(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Hello , world !", "Hello, world!"},
		{"a . b ? c", "a. b? c"},
		{" .", "."},
		{"x  .", "x ."},
		{"it ' s", "it's"},
		{"a ' ' b", "a'' b"},
		{"I 'm here", "I'm here"},
		{"they 're and we 've", "they're and we've"},
		{"he 's", "he's"},
		{"we 'll don 't I 'd", "we 'll don 't I 'd"},
		{"end '", "end '"},
		{"", ""},
		{"'", "'"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := string(cleanSpaces([]byte(tt.in))); got != tt.want {
				t.Errorf("cleanSpaces(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDetokenize(t *testing.T) {
	tk := trainedTokenizer(t, "kimi-k2")
	bos, eos := tk.BOS(), tk.EOS()
	im, _ := tk.Lookup("<|im_end|>")
	sep, _ := tk.Lookup("<|k3_sep|>")
	unused, _ := tk.Lookup("[UNUSED_TOKEN]")
	hi, _ := tk.Tokenize("hi", false, false)
	seq := append(append([]int32{bos}, hi...), im, sep, unused, eos)
	tests := []struct {
		name            string
		remove, unparse bool
		want            string
	}{
		{"control hidden", false, false, "hi<|k3_sep|>"},
		{"control shown", false, true, "[BOS]hi<|im_end|><|k3_sep|>[EOS]"},
		// Kimi adds no BOS/EOS itself, so remove has nothing to strip.
		{"remove without add flags", true, true, "[BOS]hi<|im_end|><|k3_sep|>[EOS]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tk.Detokenize(seq, tt.remove, tt.unparse)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Detokenize = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := tk.Detokenize([]int32{int32(tk.NVocab())}, false, false); err == nil {
		t.Error("no error for an out-of-range id")
	}

	c := tinyConfig("kimi-k2", []string{"<s>", "</s>"}, nil)
	c.IDs = map[string]uint32{"bos_token_id": 256, "eos_token_id": 257}
	c.Flags = map[string]bool{"add_bos_token": true, "add_eos_token": true}
	c.Types = make([]TokenType, len(c.Tokens))
	for i := range c.Types {
		c.Types[i] = TypeNormal
	}
	c.Types[256], c.Types[257] = TypeControl, TypeControl
	tk2 := mustNew(t, c)
	got, _ := tk2.Detokenize([]int32{256, 'a', 256, 257, 257}, true, true)
	if got != "a<s></s>" {
		t.Errorf("remove special: %q, want only the first BOS and last EOS dropped", got)
	}
}

func TestPieceRendering(t *testing.T) {
	c := Config{Model: "gpt2", Pre: "kimi-k2", Tokens: []string{"Ġhi", "<0x41>", "中", "x", "<c>", "<u>", "u"},
		Types: []TokenType{TypeNormal, TypeByte, TypeNormal, TypeUndefined, TypeControl, TypeUserDefined, TypeUnused}}
	tk := mustNew(t, c)
	want := []string{" hi", "A", "[UNK_BYTE_0xe4b8ad中]", "", "<c>", "<u>", ""}
	for id, w := range want {
		got, err := tk.Piece(int32(id), true)
		if err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("Piece(%q) = %q, want %q", c.Tokens[id], got, w)
		}
	}
	if p, _ := tk.Piece(4, false); p != "" {
		t.Errorf("control piece without special = %q", p)
	}
}

// stream feeds ids to a Decoder one at a time.
func stream(t *testing.T, tk *Tokenizer, ids []int32, unparse bool) []string {
	t.Helper()
	d := tk.NewDecoder(false, unparse)
	var chunks []string
	for _, id := range ids {
		s, err := d.Add(id)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, s)
	}
	return append(chunks, d.Flush())
}

func TestDecoderHoldsPartialCharacters(t *testing.T) {
	tk := mustNew(t, tinyConfig("kimi-k2", nil, nil)) // one token per byte
	ids, _ := tk.Tokenize("a中😀b", false, false)
	got := stream(t, tk, ids, false)
	want := []string{"a", "", "", "中", "", "", "", "😀", "b", ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	// A byte that can never start a valid sequence goes out at once.
	bad := []int32{tk.byteSym[0xE4], tk.byteSym['x'], tk.byteSym[0xFF]}
	if diff := cmp.Diff([]string{"", "\xe4x", "\xff", ""}, stream(t, tk, bad, false)); diff != "" {
		t.Errorf("invalid bytes (-want +got):\n%s", diff)
	}
}

// TestDecoderMatchesDetokenize streams the corpus token by token with both
// clean-up settings and checks the chunks add up to Detokenize's result
// and never cut a character of valid text.
func TestDecoderMatchesDetokenize(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	for _, pre := range []string{"kimi-k2", "llama3"} {
		tk := trainedTokenizer(t, pre)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			ids, _ := tk.Tokenize(string(b), false, true)
			for _, unparse := range []bool{false, true} {
				want, _ := tk.Detokenize(ids, false, unparse)
				chunks := stream(t, tk, ids, unparse)
				if got := strings.Join(chunks, ""); got != want {
					t.Errorf("%s %s unparse=%v: streamed text differs from Detokenize", pre, f, unparse)
				}
				if utf8.ValidString(want) {
					for i, c := range chunks {
						if !utf8.ValidString(c) {
							t.Errorf("%s %s: chunk %d %q is not valid UTF-8", pre, f, i, c)
							break
						}
					}
				}
			}
		}
	}
}

// TestDecoderCleanSpacesRandom streams random runs of the characters the
// clean-up rules look at.
func TestDecoderCleanSpacesRandom(t *testing.T) {
	tk := mustNew(t, tinyConfig("llama3", nil, nil))
	rng := rand.New(rand.NewSource(7))
	alphabet := " '.,?!smrvetdlx"
	for i := 0; i < 2000; i++ {
		n := rng.Intn(12)
		ids := make([]int32, n)
		for j := range ids {
			ids[j] = tk.byteSym[alphabet[rng.Intn(len(alphabet))]]
		}
		want, _ := tk.Detokenize(ids, false, false)
		if got := strings.Join(stream(t, tk, ids, false), ""); got != want {
			t.Fatalf("ids %v: streamed %q, Detokenize %q", ids, got, want)
		}
	}
}
