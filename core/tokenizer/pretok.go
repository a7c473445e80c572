package tokenizer

import (
	"fmt"
	"sort"
)

// A pre-tokenizer cuts a text fragment into words before BPE runs on each
// word. llama.cpp implements the common split regexes as hand-written
// scanners (unicode.cpp, unicode_regex_split_custom_*) and runs the rest
// through std::regex on a "collapsed" text; k3 reproduces the behaviour of
// whichever path llama.cpp takes for a given tokenizer.ggml.pre, scanning
// codepoints with llama.cpp's flags (see unicode.go).

// span is one chunk c[lo:hi] of a fragment's codepoints; reads outside it
// see outOfRange / flags 0, as in llama.cpp's _get_cpt / _get_flags.
type span struct {
	c      []rune
	lo, hi int
}

func (s *span) cpt(p int) rune {
	if p >= s.lo && p < s.hi {
		return s.c[p]
	}
	return outOfRange
}

func (s *span) flags(p int) uint16 {
	if p >= s.lo && p < s.hi {
		return cptFlags(s.c[p])
	}
	return 0
}

// chunker collects word lengths; add closes the word ending at end.
type chunker struct {
	out  []int
	prev int
}

func (k *chunker) add(end int) {
	if end > k.prev {
		k.out = append(k.out, end-k.prev)
	}
	k.prev = end
}

// splitFunc appends the word lengths of c[lo:hi] to out.
type splitFunc func(c []rune, lo, hi int, out []int) []int

type preKind int

const (
	preKimiK2 preKind = iota
	preLlama3
	preQwen2
	preGPT2
	preDeepseekV3
)

// preInfo is what a tokenizer.ggml.pre value selects in llama.cpp
// (llama_vocab::impl::load): the splitter and the flags that come with it.
type preInfo struct {
	kind         preKind
	cleanSpaces  bool // clean_up_tokenization_spaces on detokenize
	ignoreMerges bool // a word that is itself a token skips BPE
	addBOS       bool // default for tokenizer.ggml.add_bos_token
	noBOS        bool // the default BOS id is cleared
}

// preByName lists the tokenizer.ggml.pre values k3 implements, with the
// flags llama.cpp sets for each. BPE vocabularies start from clean_spaces on.
var preByName = map[string]preInfo{
	"kimi-k2": {kind: preKimiK2},

	"llama3":       {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"llama-v3":     {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"llama-bpe":    {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"falcon3":      {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"falcon-h1":    {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"pixtral":      {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"midm-2.0":     {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"lfm2":         {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"jina-v5-nano": {kind: preLlama3, cleanSpaces: true, ignoreMerges: true, addBOS: true},
	"dbrx":         {kind: preLlama3, cleanSpaces: true},
	"smaug-bpe":    {kind: preLlama3, cleanSpaces: true},
	"glm4":         {kind: preLlama3, cleanSpaces: true, noBOS: true},
	"chatglm-bpe":  {kind: preLlama3, cleanSpaces: true, noBOS: true},

	"qwen2":            {kind: preQwen2},
	"deepseek-r1-qwen": {kind: preQwen2},
	"kormo":            {kind: preQwen2},
	"f2llmv2":          {kind: preQwen2},
	"stablelm2":        {kind: preQwen2},
	"hunyuan":          {kind: preQwen2},
	"grok-2":           {kind: preQwen2},
	"solar-open":       {kind: preQwen2},
	"megrez":           {kind: preQwen2, cleanSpaces: true},

	"gpt-2":           {kind: preGPT2, cleanSpaces: true},
	"phi-2":           {kind: preGPT2, cleanSpaces: true},
	"gigachat":        {kind: preGPT2, cleanSpaces: true},
	"a.x-4.0":         {kind: preGPT2, cleanSpaces: true},
	"mellum":          {kind: preGPT2, cleanSpaces: true},
	"exaone4":         {kind: preGPT2, cleanSpaces: true},
	"mpt":             {kind: preGPT2, cleanSpaces: true},
	"olmo":            {kind: preGPT2, cleanSpaces: true},
	"jais":            {kind: preGPT2, cleanSpaces: true},
	"trillion":        {kind: preGPT2},
	"granite-docling": {kind: preGPT2},

	"deepseek-v3":   {kind: preDeepseekV3},
	"hunyuan-dense": {kind: preDeepseekV3},
	"joyai-llm":     {kind: preDeepseekV3},
}

// PreTokenizers lists the tokenizer.ggml.pre values k3 implements.
func PreTokenizers() []string {
	names := make([]string, 0, len(preByName))
	for n := range preByName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookupPre(name string) (preInfo, error) {
	p, ok := preByName[name]
	if !ok {
		return preInfo{}, fmt.Errorf("tokenizer: pre-tokenizer %q is not implemented (k3 has kimi-k2, llama3, qwen2, gpt-2, deepseek-v3 and their aliases)", name)
	}
	return p, nil
}

// split appends the word lengths (in codepoints) of the whole fragment c.
func (k preKind) split(c []rune, out []int, scratch *[]byte) []int {
	switch k {
	case preKimiK2:
		return splitKimiK2(c, 0, len(c), out)
	case preLlama3:
		return splitLlama3(c, 0, len(c), out, 3)
	case preQwen2:
		return splitLlama3(c, 0, len(c), out, 1)
	case preGPT2:
		return splitGPT2(c, 0, len(c), out)
	case preDeepseekV3:
		return splitDeepseekV3(c, out, scratch)
	}
	panic("tokenizer: unknown pre-tokenizer kind")
}

// contraction returns the length of a 's 't 'm 'd 're 've 'll suffix at pos,
// or 0; fold makes the letters case-insensitive.
func contraction(s *span, pos int, fold bool) int {
	if s.cpt(pos) != '\'' || pos+1 >= s.hi {
		return 0
	}
	lower := func(r rune) rune {
		if fold {
			return asciiLower(r)
		}
		return r
	}
	switch lower(s.cpt(pos + 1)) {
	case 's', 't', 'm', 'd':
		return 2
	}
	if pos+2 < s.hi {
		a, b := lower(s.cpt(pos+1)), lower(s.cpt(pos+2))
		if (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') {
			return 3
		}
	}
	return 0
}

// numberGroups consumes a run of \p{N} from pos in groups of at most n.
func numberGroups(s *span, k *chunker, pos, n int) int {
	ini := pos
	for s.flags(pos)&flagNumber != 0 {
		pos++
		if pos-ini >= n {
			k.add(pos)
			ini = pos
		}
	}
	k.add(pos)
	return pos
}

// whitespaceRun implements the trailing alternatives shared by the llama3
// family: \s*[\r\n]+ | \s+(?!\S) | \s+ | any single character.
func whitespaceRun(s *span, k *chunker, pos int) int {
	n, lastNL := 0, 0
	for s.flags(pos+n)&flagWhitespace != 0 {
		if c := s.cpt(pos + n); c == '\r' || c == '\n' {
			lastNL = pos + n + 1
		}
		n++
	}
	switch {
	case lastNL > 0:
		pos = lastNL
	case n > 1 && s.cpt(pos+n) != outOfRange:
		pos += n - 1
	case n > 0:
		pos += n
	default:
		pos++
	}
	k.add(pos)
	return pos
}

const notWordMask = flagWhitespace | flagLetter | flagNumber

// punctRun implements " ?[^\s\p{L}\p{N}]+[\r\n]*" from pos (after the
// caller decided it applies); a leading space is consumed when present.
func punctRun(s *span, k *chunker, pos int, f2 uint16) int {
	if s.cpt(pos) == ' ' {
		pos++
	}
	for f2&notWordMask == 0 && f2 != 0 {
		pos++
		f2 = s.flags(pos)
	}
	for c := s.cpt(pos); c == '\r' || c == '\n'; c = s.cpt(pos) {
		pos++
	}
	k.add(pos)
	return pos
}

// splitLlama3 is llama.cpp's scanner for
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// and, with digits = 1, for qwen2's variant with \p{N} in place of \p{N}{1,3}.
func splitLlama3(c []rune, lo, hi int, out []int, digits int) []int {
	s := &span{c, lo, hi}
	k := &chunker{out: out, prev: lo}
	for pos := lo; pos < hi; {
		cpt, f := c[pos], cptFlags(c[pos])
		if n := contraction(s, pos, true); n > 0 {
			pos += n
			k.add(pos)
			continue
		}
		if !(cpt == '\r' || cpt == '\n' || f&flagNumber != 0) && (f&flagLetter != 0 || s.flags(pos+1)&flagLetter != 0) {
			pos++
			for s.flags(pos)&flagLetter != 0 {
				pos++
			}
			k.add(pos)
			continue
		}
		if f&flagNumber != 0 {
			pos = numberGroups(s, k, pos, digits)
			continue
		}
		f2 := f
		if cpt == ' ' {
			f2 = s.flags(pos + 1)
		}
		// llama.cpp tests the current codepoint's flags (not f2) for being
		// defined here, unlike in the kimi-k2 scanner.
		if f2&notWordMask == 0 && f != 0 {
			pos = punctRun(s, k, pos, f2)
			continue
		}
		pos = whitespaceRun(s, k, pos)
	}
	return k.out
}

// splitKimiK2 is llama.cpp's scanner for Kimi K2's pattern:
// [\p{Han}]+ | letter words (no Han) with an optional leading non-letter and
// an optional contraction | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]* |
// \s*[\r\n]+ | \s+(?!\S) | \s+. Like llama.cpp it does not separate
// upper- from lower-case runs inside a word.
func splitKimiK2(c []rune, lo, hi int, out []int) []int {
	s := &span{c, lo, hi}
	k := &chunker{out: out, prev: lo}
	letter := func(p int) bool { return s.flags(p)&flagLetter != 0 && !isHan(s.cpt(p)) }
	for pos := lo; pos < hi; {
		cpt, f := c[pos], cptFlags(c[pos])
		if isHan(cpt) {
			for pos < hi && isHan(c[pos]) {
				pos++
			}
			k.add(pos)
			continue
		}
		leading := !(cpt == '\r' || cpt == '\n' || f&(flagLetter|flagNumber) != 0)
		if letter(pos) || (leading && letter(pos+1)) {
			if leading {
				pos++
			}
			for letter(pos) {
				pos++
			}
			pos += contraction(s, pos, true)
			k.add(pos)
			continue
		}
		if f&flagNumber != 0 {
			pos = numberGroups(s, k, pos, 3)
			continue
		}
		f2 := f
		if cpt == ' ' {
			f2 = s.flags(pos + 1)
		}
		if f2&notWordMask == 0 && f2 != 0 {
			pos = punctRun(s, k, pos, f2)
			continue
		}
		pos = whitespaceRun(s, k, pos)
	}
	return k.out
}

// splitGPT2 is llama.cpp's scanner for GPT-2's
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (contractions are case-sensitive here).
func splitGPT2(c []rune, lo, hi int, out []int) []int {
	s := &span{c, lo, hi}
	k := &chunker{out: out, prev: lo}
	for pos := lo; pos < hi; {
		if n := contraction(s, pos, false); n > 0 {
			pos += n
			k.add(pos)
			continue
		}
		f2 := cptFlags(c[pos])
		if c[pos] == ' ' {
			f2 = s.flags(pos + 1)
		}
		// The class of the run: letters, numbers, or neither (and defined).
		var same func(uint16) bool
		switch {
		case f2&flagLetter != 0:
			same = func(x uint16) bool { return x&flagLetter != 0 }
		case f2&flagNumber != 0:
			same = func(x uint16) bool { return x&flagNumber != 0 }
		case f2&notWordMask == 0 && f2 != 0:
			same = func(x uint16) bool { return x&notWordMask == 0 && x != 0 }
		}
		if same != nil {
			if c[pos] == ' ' {
				pos++
			}
			for same(s.flags(pos)) {
				pos++
			}
			k.add(pos)
			continue
		}
		n := 0
		for s.flags(pos+n)&flagWhitespace != 0 {
			n++
		}
		switch {
		case n > 1 && s.cpt(pos+n) != outOfRange:
			pos += n - 1
		case n > 0:
			pos += n
		default:
			pos++
		}
		k.add(pos)
	}
	return k.out
}
