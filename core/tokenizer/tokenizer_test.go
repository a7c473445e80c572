package tokenizer

import (
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustNew(t *testing.T, c Config) *Tokenizer {
	t.Helper()
	tk, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// ids looks up token texts given as raw strings.
func ids(t *testing.T, tk *Tokenizer, raw ...string) []int32 {
	t.Helper()
	var out []int32
	for _, r := range raw {
		id, ok := tk.byText[byteEncode(r)]
		if !ok {
			if id, ok = tk.byText[r]; !ok {
				t.Fatalf("no token %q", r)
			}
		}
		out = append(out, id)
	}
	return out
}

func TestBPE(t *testing.T) {
	tests := []struct {
		name   string
		extra  []string
		merges [][2]string
		in     string
		want   []string
	}{
		// Equal ranks merge leftmost first, so "aaaa" becomes aa+aa even
		// though "aa a" could make "aaa".
		{"leftmost of equal ranks", []string{"aa", "aaa"}, [][2]string{{"a", "a"}, {"aa", "a"}}, "aaaa", []string{"aa", "aa"}},
		{"lower rank first", []string{"aa", "aaa"}, [][2]string{{"a", "a"}, {"aa", "a"}}, "aaa", []string{"aaa"}},
		{"rank beats position", []string{"ab", "bc"}, [][2]string{{"b", "c"}, {"a", "b"}}, "abc", []string{"a", "bc"}},
		{"no merges", nil, nil, "hi", []string{"h", "i"}},
		// "ab" is not a token but "ab c" makes "abc" from it.
		{"intermediate outside vocab", []string{"abc"}, [][2]string{{"a", "b"}, {"ab", "c"}}, "abc", []string{"abc"}},
		// ...and when no later merge uses it, it falls back to its bytes.
		{"fallback to bytes", []string{"abc"}, [][2]string{{"a", "b"}, {"ab", "c"}}, "abd", []string{"a", "b", "d"}},
		{"multibyte", []string{"é", " é"}, [][2]string{{"\xc3", "\xa9"}, {" ", "é"}}, "é é", []string{"é", " é"}},
		{"invalid UTF-8 becomes U+FFFD", nil, nil, "\xff", []string{"\xef", "\xbf", "\xbd"}},
		{"overlong NUL is re-encoded", nil, nil, "\xc0\x80", []string{"\x00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := mustNew(t, tinyConfig("qwen2", tt.extra, tt.merges))
			got, err := tk.Tokenize(tt.in, false, false)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ids(t, tk, tt.want...), got); diff != "" {
				t.Errorf("Tokenize(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestIgnoreMerges(t *testing.T) {
	// llama3 takes a word that is a token as is; qwen2 runs BPE, which
	// cannot reach "hello" here because no merge builds it.
	extra := []string{"hello", "he"}
	merges := [][2]string{{"h", "e"}}
	for _, tt := range []struct {
		pre  string
		want []string
	}{
		{"llama3", []string{"hello"}},
		{"qwen2", []string{"he", "l", "l", "o"}},
	} {
		t.Run(tt.pre, func(t *testing.T) {
			tk := mustNew(t, tinyConfig(tt.pre, extra, merges))
			got, err := tk.Tokenize("hello", false, false)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ids(t, tk, tt.want...), got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func specialConfig() Config {
	c := tinyConfig("kimi-k2", nil, nil)
	add := func(text string, typ TokenType) {
		c.Tokens = append(c.Tokens, text)
		for len(c.Types) < len(c.Tokens)-1 {
			c.Types = append(c.Types, TypeNormal)
		}
		c.Types = append(c.Types, typ)
	}
	add("<|x|>", TypeControl)
	add("<|x|>y", TypeControl)
	add("cde", TypeControl)
	add("bc", TypeControl)
	add("<u>", TypeUserDefined)
	add("[UNK]", TypeUnknown)
	return c
}

func TestSpecialPartition(t *testing.T) {
	tk := mustNew(t, specialConfig())
	sp := func(s string) string { return s }
	tests := []struct {
		name  string
		in    string
		parse bool
		want  []string
	}{
		{"control parsed", "a<|x|>b", true, []string{"a", sp("<|x|>"), "b"}},
		{"longest first", "<|x|>y<|x|>", true, []string{sp("<|x|>y"), sp("<|x|>")}},
		// "cde" is longer, so it is cut first and "bc" no longer occurs.
		{"longer token wins overlap", "bcde", true, []string{"b", sp("cde")}},
		{"control ignored", "a<|x|>b", false, []string{"a", "<", "|", "x", "|", ">", "b"}},
		{"user-defined always parsed", "a<u>b", false, []string{"a", sp("<u>"), "b"}},
		{"unknown only when parsing", "[UNK]", true, []string{sp("[UNK]")}},
		{"adjacent", "<u><u>", false, []string{sp("<u>"), sp("<u>")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tk.Tokenize(tt.in, false, tt.parse)
			if err != nil {
				t.Fatal(err)
			}
			var want []int32
			for _, w := range tt.want {
				if id, ok := tk.byText[w]; ok && tk.attrs[id]&(AttrControl|AttrUserDefined|AttrUnknown) != 0 {
					want = append(want, id)
					continue
				}
				// plain text: tokenize it alone (no merges: one token per byte)
				for i := 0; i < len(w); i++ {
					want = append(want, tk.byteSym[w[i]])
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Tokenize(%q, parse=%v) (-want +got):\n%s", tt.in, tt.parse, diff)
			}
		})
	}
}

func TestAddSpecial(t *testing.T) {
	c := tinyConfig("kimi-k2", []string{"<s>", "</s>"}, nil)
	c.IDs = map[string]uint32{"bos_token_id": 256, "eos_token_id": 257}
	c.Flags = map[string]bool{"add_bos_token": true, "add_eos_token": true}
	tk := mustNew(t, c)
	got, err := tk.Tokenize("a", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int32{256, 'a', 257}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	got, _ = tk.Tokenize("", true, false)
	if diff := cmp.Diff([]int32{256, 257}, got); diff != "" {
		t.Errorf("empty text (-want +got):\n%s", diff)
	}

	// gpt2's default BOS id is 11; with no such token and add_bos set,
	// tokenizing with special tokens fails (llama.cpp asserts).
	c = Config{Model: "gpt2", Pre: "kimi-k2", Tokens: []string{"a", "b"}, Flags: map[string]bool{"add_bos_token": true}}
	tk = mustNew(t, c)
	if _, err := tk.Tokenize("a", true, false); err == nil {
		t.Error("no error for a missing BOS")
	}
	if tk.BOS() != NoToken || tk.EOS() != NoToken {
		t.Errorf("out-of-range default ids kept: bos %d eos %d", tk.BOS(), tk.EOS())
	}
}

func TestNewErrors(t *testing.T) {
	base := tinyConfig("kimi-k2", nil, nil)
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"model", func(c *Config) { c.Model = "llama" }, "tokenizer.ggml.model"},
		{"pre", func(c *Config) { c.Pre = "nope" }, "pre-tokenizer"},
		{"empty", func(c *Config) { c.Tokens = nil }, "empty"},
		{"types short", func(c *Config) { c.Types = []TokenType{1} }, "token_type"},
		{"duplicate", func(c *Config) { c.Tokens = append(c.Tokens, "a") }, "both"},
		{"merges", func(c *Config) { c.Pre = "qwen2"; c.Merges = nil }, "merges"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.Tokens = append([]string(nil), base.Tokens...)
			tt.edit(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestLoadFixups(t *testing.T) {
	c := tinyConfig("kimi-k2", nil, nil)
	for _, w := range []string{"[EOT]", "<|im_end|>", "[EOS]", "<|unused_3|>", "[PAD]"} {
		c.Tokens = append(c.Tokens, w)
	}
	c.Types = make([]TokenType, len(c.Tokens))
	for i := range c.Types {
		c.Types[i] = TypeNormal
	}
	c.Types[259] = TypeControl // <|unused_3|>
	c.IDs = map[string]uint32{"eos_token_id": 258}
	tk := mustNew(t, c)
	if tk.EOT() != 257 {
		t.Errorf("EOT = %d, want 257 (<|im_end|> comes first in k3's candidate list)", tk.EOT())
	}
	for _, id := range []int32{256, 257, 258, 260} {
		if tk.Attr(id)&AttrControl == 0 {
			t.Errorf("%q not forced to CONTROL", tk.Token(id))
		}
	}
	if tk.Attr(259)&AttrUnused == 0 {
		t.Error("control token with \"unused\" not marked unused")
	}
	if diff := cmp.Diff([]int32{256, 257, 258, 260}, tk.EOG()); diff != "" {
		t.Errorf("EOG (-want +got):\n%s", diff)
	}
}

// TestConcurrentUse tokenizes from several goroutines at once; run with
// -race to check that the pooled scratch state is never shared.
func TestConcurrentUse(t *testing.T) {
	tk := trainedTokenizer(t, "kimi-k2")
	texts := []string{"Hello, world! It's 2024.", "中文 and English <|im_end|>", "  \n\n\tcode()  ", "naïve café"}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i], _ = tk.Tokenize(s, false, true)
	}
	errs := make(chan string, 8)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k := (g + i) % len(texts)
				got, _ := tk.Tokenize(texts[k], false, true)
				if !cmp.Equal(want[k], got) {
					errs <- texts[k]
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Tokenize(%q) differs from sequential", s)
	}
}
