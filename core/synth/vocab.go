package synth

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Token types (llama_token_type) stored in tokenizer.ggml.token_type.
const (
	TokenNormal  = 1
	TokenControl = 3
	TokenUnused  = 5
)

// Control tokens of the vocabulary. The last five are K3's: the chat
// template builds its tags from <|open|>, <|sep|> and <|close|>, ends each
// message with <|end_of_msg|> (the eos), and marks images with
// <|kimi_image_placeholder|>. [EOT] is what llama.cpp recognises as Kimi's
// end-of-turn token.
var controlTokens = []string{
	"[BOS]", "[EOS]", "[EOT]", "[UNK]", "[PAD]",
	"<|end_of_msg|>", "<|open|>", "<|sep|>", "<|close|>", "<|kimi_image_placeholder|>",
}

const (
	bosToken = "[BOS]"
	eosToken = "<|end_of_msg|>"
	padToken = "[PAD]"
	// maxMerges bounds the merges learned from sampleText; larger
	// vocabularies are padded with unused tokens, as the converter pads.
	maxMerges = 4096
)

// minVocab is the smallest vocabulary: the byte tokens and control tokens.
var minVocab = 256 + len(controlTokens)

// Vocab is a byte-level BPE vocabulary in GGUF form (tokenizer.ggml.*).
type Vocab struct {
	Tokens []string // GPT-2 byte-to-unicode form for normal tokens
	Types  []int32
	Merges []string // "left right", rank = index
	BOS    uint32
	EOS    uint32
	PAD    uint32
}

// ID returns the id of token s, or -1.
func (v *Vocab) ID(s string) int {
	for i, t := range v.Tokens {
		if t == s {
			return i
		}
	}
	return -1
}

// NewVocab builds the vocabulary of size n: 256 byte tokens, merges learned
// from sampleText, unused padding, then the control tokens in the last
// block of ids, where Kimi keeps its specials (the last 256 ids when the
// vocabulary is large, right after the normal tokens when it is small).
func NewVocab(n int) (*Vocab, error) {
	return newVocab(n, controlTokens, bosToken, eosToken, padToken)
}

// newVocab is NewVocab with another model's control tokens (bos, eos and
// pad among them).
func newVocab(n int, controlTokens []string, bosToken, eosToken, padToken string) (*Vocab, error) {
	if minVocab := 256 + len(controlTokens); n < minVocab {
		return nil, fmt.Errorf("synth: vocabulary of %d is below the minimum %d", n, minVocab)
	}
	specialBase := n - len(controlTokens)
	if n >= 4096 {
		specialBase = n - 256
	}
	v := &Vocab{Tokens: make([]string, 0, n), Types: make([]int32, 0, n)}
	b2u := byteToUnicode()
	for b := range 256 {
		v.Tokens = append(v.Tokens, b2u[b])
		v.Types = append(v.Types, TokenNormal)
	}
	seen := map[string]bool{}
	for _, t := range v.Tokens {
		seen[t] = true
	}
	// two merges can make the same string ("a bc", "ab c"): both stay
	// merges, the token is listed once
	for _, m := range learnedMerges() {
		joined := strings.Replace(m, " ", "", 1)
		if !seen[joined] && len(v.Tokens) == specialBase {
			break
		}
		v.Merges = append(v.Merges, m)
		if !seen[joined] {
			seen[joined] = true
			v.Tokens = append(v.Tokens, joined)
			v.Types = append(v.Types, TokenNormal)
		}
	}
	for i := len(v.Tokens); i < specialBase; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", i))
		v.Types = append(v.Types, TokenUnused)
	}
	for _, c := range controlTokens {
		v.Tokens = append(v.Tokens, c)
		v.Types = append(v.Types, TokenControl)
	}
	for i := len(v.Tokens); i < n; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("<|reserved_token_%d|>", i-specialBase))
		v.Types = append(v.Types, TokenControl)
	}
	id := func(s string) uint32 { return uint32(specialBase + indexOf(controlTokens, s)) }
	v.BOS, v.EOS, v.PAD = id(bosToken), id(eosToken), id(padToken)
	return v, nil
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// byteToUnicode is GPT-2's reversible map from bytes to printable runes:
// printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.
func byteToUnicode() [256]string {
	var m [256]string
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = string(rune(b))
		} else {
			m[b] = string(rune(256 + n))
			n++
		}
	}
	return m
}

var (
	mergesOnce sync.Once
	mergesList []string
)

func learnedMerges() []string {
	mergesOnce.Do(func() { mergesList = learnBPE(pretokenize(sampleText), maxMerges) })
	return mergesList
}

// pretokenize splits text roughly as Kimi's pre-tokenizer does, so merges
// never cross what it keeps apart: letter runs with an optional leading
// space, CJK runs, digit groups of up to three, punctuation runs, newlines
// and other whitespace.
func pretokenize(text string) []string {
	var words []string
	for len(text) > 0 {
		n := wordLen(text)
		words = append(words, text[:n])
		text = text[n:]
	}
	return words
}

type runeClass int

const (
	clsLetter runeClass = iota
	clsCJK
	clsDigit
	clsNewline
	clsSpace
	clsOther
)

func classOf(r rune) runeClass {
	switch {
	case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul):
		return clsCJK
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return clsLetter
	case unicode.IsDigit(r):
		return clsDigit
	case r == '\n' || r == '\r':
		return clsNewline
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

func wordLen(s string) int {
	r, n := utf8.DecodeRuneInString(s)
	cls := classOf(r)
	i := n
	if r == ' ' && len(s) > 1 {
		// a space attaches to the letter or punctuation run after it
		r2, _ := utf8.DecodeRuneInString(s[1:])
		if c2 := classOf(r2); c2 == clsLetter || c2 == clsOther {
			cls = c2
		}
	}
	count := 1
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if classOf(r) != cls || (cls == clsDigit && count == 3) {
			break
		}
		i += n
		count++
	}
	return i
}

// learnBPE learns up to n merges from words, most frequent pair first;
// ties go to the smaller pair string, so the result is deterministic.
// Pairs seen once are merged too, after all the others: they make whole
// rare words single tokens, as a tokenizer trained on more text would.
func learnBPE(words []string, n int) []string {
	b2u := byteToUnicode()
	counts := map[string]int{}
	for _, w := range words {
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	keys := make([]string, 0, len(counts))
	for w := range counts {
		keys = append(keys, w)
	}
	sort.Strings(keys)
	ws := make([]word, 0, len(keys))
	for _, k := range keys {
		syms := make([]string, len(k))
		for i := 0; i < len(k); i++ {
			syms[i] = b2u[k[i]]
		}
		ws = append(ws, word{syms, counts[k]})
	}
	var merges []string
	for len(merges) < n {
		pairs := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range pairs {
			if c > bestN || (c == bestN && p[0]+" "+p[1] < best[0]+" "+best[1]) {
				best, bestN = p, c
			}
		}
		if bestN == 0 {
			break
		}
		merges = append(merges, best[0]+" "+best[1])
		joined := best[0] + best[1]
		for wi := range ws {
			s := ws[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, joined)
					i++
					continue
				}
				out = append(out, s[i])
			}
			ws[wi].syms = out
		}
	}
	return merges
}
