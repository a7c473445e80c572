package tokenizer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// words splits text with a pre-tokenizer and returns the words as strings.
func words(k preKind, text string) []string {
	flagsOnce.Do(buildFlags)
	c := decodeCpts(nil, text)
	var scratch []byte
	var out []string
	pos := 0
	for _, n := range k.split(c, nil, &scratch) {
		var w []byte
		for _, r := range c[pos : pos+n] {
			w = appendCpt(w, r)
		}
		out = append(out, string(w))
		pos += n
	}
	return out
}

// The expected splits follow the regex each scanner stands for, with
// llama.cpp's deviations noted where they matter.
func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		kind preKind
		in   string
		want []string
	}{
		{"kimi words", preKimiK2, "Hello world", []string{"Hello", " world"}},
		{"kimi contractions any case", preKimiK2, "I'M HERE's don't WE'LL", []string{"I'M", " HERE's", " don't", " WE'LL"}},
		// No stand-alone contraction alternative: "'s" is a leading char + letters.
		{"kimi contraction alone", preKimiK2, "'s 're", []string{"'s", " '", "re"}},
		{"kimi han run", preKimiK2, "中文字符abc", []string{"中文字符", "abc"}},
		{"kimi space before han", preKimiK2, "a 中文", []string{"a", " ", "中文"}},
		{"kimi kana is not han", preKimiK2, "ひらがな漢字", []string{"ひらがな", "漢字"}},
		{"kimi digits", preKimiK2, "1234567", []string{"123", "456", "7"}},
		{"kimi digits after space", preKimiK2, "x 42", []string{"x", " ", "42"}},
		{"kimi spaces before word", preKimiK2, "  hello", []string{" ", " hello"}},
		{"kimi newline run", preKimiK2, "hi  \n\n  there", []string{"hi", "  \n\n", " ", " there"}},
		{"kimi punct with newlines", preKimiK2, "!!!\n\nabc", []string{"!!!\n\n", "abc"}},
		{"kimi space punct", preKimiK2, "a ...", []string{"a", " ..."}},
		{"kimi crlf", preKimiK2, "a\r\nb", []string{"a", "\r\n", "b"}},
		{"kimi trailing spaces", preKimiK2, "x   ", []string{"x", "   "}},
		// llama.cpp's scanner keeps marks out of words, unlike Kimi's regex.
		{"kimi combining mark", preKimiK2, "e\u0301", []string{"e", "\u0301"}},
		{"kimi camel case stays whole", preKimiK2, "camelCaseWord", []string{"camelCaseWord"}},
		{"kimi tab before word", preKimiK2, "\tfoo", []string{"\tfoo"}},

		{"llama3 words", preLlama3, "Hello world", []string{"Hello", " world"}},
		{"llama3 contraction split", preLlama3, "I'M", []string{"I", "'M"}},
		{"llama3 digits", preLlama3, "1234567", []string{"123", "456", "7"}},
		{"llama3 newline", preLlama3, "a\n\n b", []string{"a", "\n\n", " b"}},
		{"llama3 punct", preLlama3, "x?!\n", []string{"x", "?!\n"}},
		{"qwen2 digits", preQwen2, "x123", []string{"x", "1", "2", "3"}},

		{"gpt2 words", preGPT2, "Hello  world's", []string{"Hello", " ", " world", "'s"}},
		{"gpt2 case-sensitive contraction", preGPT2, "it'S", []string{"it", "'", "S"}},
		{"gpt2 numbers", preGPT2, "a 12345", []string{"a", " 12345"}},

		{"deepseek words and digits", preDeepseekV3, "Hello world 1234", []string{"Hello", " world", " ", "123", "4"}},
		{"deepseek ascii punct + letters", preDeepseekV3, "(foo)\n.bar", []string{"(foo", ")\n", ".bar"}},
		{"deepseek punct run first", preDeepseekV3, "(foo).bar", []string{"(foo", ").", "bar"}},
		{"deepseek cjk", preDeepseekV3, "你好世界abc", []string{"你好世界", "abc"}},
		{"deepseek kana", preDeepseekV3, "カタカナです", []string{"カタカナです"}},
		{"deepseek newlines", preDeepseekV3, "a \n\n b", []string{"a", " \n\n", " b"}},
		{"deepseek space punct", preDeepseekV3, "a ...\n", []string{"a", " ...\n"}},
		{"deepseek trailing spaces", preDeepseekV3, "a   ", []string{"a", "   "}},
		{"deepseek spaces before word", preDeepseekV3, "a   b", []string{"a", "  ", " b"}},
		// A control character matches no alternative: it joins the gap.
		{"deepseek gap", preDeepseekV3, "a\x01\x02b", []string{"a", "\x01", "\x02b"}},
		{"deepseek zwj", preDeepseekV3, "👨\u200d👩", []string{"👨", "\u200d", "👩"}},
		{"deepseek mark leads", preDeepseekV3, "\u0301abc", []string{"\u0301abc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, words(tt.kind, tt.in)); diff != "" {
				t.Errorf("split(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// Every pre-tokenizer must cover its input exactly, whatever the input.
func TestSplitCovers(t *testing.T) {
	inputs := []string{"", " ", "\n", "a", "\xff\xfe", "  \t\r\n\u3000x", "'", "'s'", "1'23", "\u0301\u0301",
		"ab\u00a0\u00a0cd", "<|im_end|>", "中文 ja カタ 한국어", "🙂\u200d🙂  \r\n\r\n"}
	for _, k := range []preKind{preKimiK2, preLlama3, preQwen2, preGPT2, preDeepseekV3} {
		for _, in := range inputs {
			c := decodeCpts(nil, in)
			var scratch []byte
			total := 0
			for _, n := range k.split(c, nil, &scratch) {
				if n <= 0 {
					t.Errorf("kind %d, %q: empty word", k, in)
				}
				total += n
			}
			if total != len(c) {
				t.Errorf("kind %d, %q: words cover %d of %d codepoints", k, in, total, len(c))
			}
		}
	}
}
